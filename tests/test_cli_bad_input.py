"""Bad flags and bad arguments, command by command: one line, a non-zero exit, and no store created.

Each runs in an empty directory with the store given as a file there, so "nothing created" is
"the directory is still empty". Usage errors (click's) exit 2 and point at the command's --help;
a keepstate refusal of ``state`` prints its wire form, also in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cliproc import assert_one_line_error, run_cli

CASES = {
    "no such command": (["nosuch"], 2, "No such command"),
    "no such option": (["export", "--stroe", "sqlite:///x.db"], 2, "--stroe"),
    "keys: unknown role": (["keys", "create", "--role", "king", "--store", "{store}"], 2, "--role"),
    "keys: bad environment": (
        ["keys", "create", "--role", "admin", "--env", "bad env!", "--store", "{store}"],
        2,
        "--env",
    ),
    "migrate: bad harness prefix": (
        ["migrate", "--store", "{store}", "--harness-prefix", "bad prefix"],
        2,
        "--harness-prefix",
    ),
    "migrate: harness on redis": (
        ["migrate", "--store", "redis://127.0.0.1:1/0", "--harness-prefix", "h1"],
        2,
        "has no harness store",
    ),
    "state: missing id": (["state", "get", "--agent", "a", "k", "--store", "{store}"], 2, "--id is required"),
    "state: unknown scope": (["state", "ls", "--scope", "team", "--agent", "a", "--store", "{store}"], 2, "--scope"),
    "state: bad if-version": (
        ["state", "put", "--agent", "a", "--id", "s", "k", "1", "--if-version", "one", "--store", "{store}"],
        2,
        "--if-version",
    ),
    "state: bad agent": (
        ["state", "put", "--agent", "bad agent", "--id", "s", "k", "1", "--store", "{store}"],
        1,
        "invalid_key",
    ),
    "state: bad key": (
        ["state", "put", "--agent", "a", "--id", "s", "bad key!", "1", "--store", "{store}"],
        1,
        "invalid_key",
    ),
    "state: bad value": (
        ["state", "put", "--agent", "a", "--id", "s", "k", "NaN", "--store", "{store}"],
        1,
        "invalid_value",
    ),
    "state: value not JSON": (
        ["state", "put", "--agent", "a", "--id", "s", "k", "{", "--store", "{store}"],
        1,
        "invalid_value",
    ),
    "state: agent scope with id": (
        ["state", "put", "--scope", "agent", "--agent", "a", "--id", "s", "k", "1", "--store", "{store}"],
        1,
        "invalid_request",
    ),
    "worker: no module": (["worker", "no_such_module_here"], 2, "cannot import"),
    "worker: concurrency 0": (["worker", "m", "--concurrency", "0"], 2, "--concurrency"),
    "worker: poll too long": (["worker", "m", "--poll", "100"], 2, "--poll"),
    "worker: log level": (["worker", "m", "--log-level", "LOUD"], 2, "--log-level"),
    "store URL two slashes": (
        ["state", "ls", "--agent", "a", "--id", "s", "--store", "sqlite://x.db"],
        2,
        "not a SQLite store URL",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_creates_nothing(tmp_path: Path, case: str) -> None:
    args, status, needle = CASES[case]
    store = f"sqlite:///{tmp_path / 'store.db'}"
    done = run_cli(*(arg.replace("{store}", store) for arg in args), cwd=tmp_path, input="")
    line = assert_one_line_error(done, needle, status=status)
    if status == 2:
        assert "--help" in line
    elif case.startswith("state"):
        assert set(json.loads(line)) >= {"error", "message"}
    assert list(tmp_path.iterdir()) == []
