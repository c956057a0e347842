"""Every numeric option of the ``keepstate`` command refuses non-finite and absurd values as a usage error.

``nan`` passes any of click's ranges (every comparison with NaN is false), ``inf`` an open end, and
``1e308`` or a 20-digit integer what a store can hold: each used to fail far from its option (``purge
--older-than nan`` as "unexpected: please report it", ``serve --retention-days nan`` as a traceback at
every sweep). The first test walks the command tree, so an option added later without a bound fails it.
"""

from __future__ import annotations

import math
from pathlib import Path

import click
import pytest

from cliproc import assert_one_line_error, run_cli
from keepstate.cli import _COMMANDS, main
from keepstate.cli.numbers import Finite
from keepstate.platform.upkeep import Upkeep


def _options(command: click.Command, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], click.Option]]:
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        found = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            found += _options(sub, (*path, name))
        return found
    return [(path, param) for param in command.params if isinstance(param, click.Option)]


NUMERIC = [
    (path, option)
    for path, option in _options(main, ())
    if isinstance(option.type, click.types.FloatParamType | click.types.IntParamType)
]


def test_every_numeric_option_has_finite_bounds() -> None:
    assert {path[0] for path, _ in NUMERIC} >= {"serve", "purge", "worker", "state"}
    assert set(_COMMANDS) >= {path[0] for path, _ in NUMERIC}
    for path, option in NUMERIC:
        kind = option.type
        where = f"{' '.join(path)} {option.opts[0]}"
        assert isinstance(kind, click.IntRange | Finite), where
        assert kind.min is not None and kind.max is not None, where
        assert math.isfinite(kind.min) and math.isfinite(kind.max) and kind.max < 2**63, where


BAD = ["nan", "NaN", "inf", "-inf", "1e308", "99999999999999999999"]


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize(
    ("args", "option"), [([*path, option.opts[0]], option.opts[0]) for path, option in NUMERIC], ids=str
)
def test_a_bad_number_is_one_line_exit_2(tmp_path: Path, args: list[str], option: str, value: str) -> None:
    command = [*args, value]
    if args[0] == "worker":
        command = ["worker", "nowhere:worker", *args[1:], value]
    if args[:2] == ["state", "put"] or args[:2] == ["state", "delete"]:
        command = [*command, "--agent", "a", "k", *(["1"] if args[1] == "put" else [])]
    done = run_cli(*command, cwd=tmp_path)
    assert_one_line_error(done, option, status=2)


def test_a_library_retention_no_purge_could_use_is_refused() -> None:
    for days in (math.nan, math.inf, 1e308, -1.0):
        with pytest.raises(ValueError, match="days from 0"):
            Upkeep(None, days)  # type: ignore[arg-type]  # refused before the invocations are used
