"""Every command that opens a store, given one it cannot open, says so in one line and creates nothing.

The stores: a SQLite file in a directory that does not exist, a SQLite "file" that is a directory,
PostgreSQL and Redis on a port where nothing listens, and a scheme keepstate does not know. The
commands: everything that opens a store. Each pair is a test of its own, running one real ``keepstate``
process (a module fixture running all 45 at once was built again on every pytest-xdist worker that ran
one of them: four times the processes).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from urllib.parse import quote

import pytest

from cliproc import Done, assert_one_line_error, run_cli
from serverproc import closed_port, free_port

DUMP = (
    '{"type": "keepstate-export", "version": 2, "platform": false}\n'
    '{"type": "keepstate-export", "end": true, "records": 0}\n'
)
COMMANDS = {
    "export": ["export"],
    "import": ["import"],
    "serve": ["serve", "--port", "{port}"],
    "keys-create": ["keys", "create", "--role", "admin"],
    "migrate": ["migrate"],
    "state-get": ["state", "get", "--agent", "a", "--id", "s", "k"],
    "state-put": ["state", "put", "--agent", "a", "--id", "s", "k", "1"],
    "state-delete": ["state", "delete", "--agent", "a", "--id", "s", "k"],
    "state-ls": ["state", "ls", "--agent", "a", "--id", "s"],
}
STORES = ("sqlite-no-dir", "sqlite-dir", "postgres-down", "redis-down", "unknown-scheme")
ADMIN_KEY = f"ks_{secrets.token_urlsafe(32)}"


def _store(kind: str, root: Path, closed_port: int) -> str:
    return {
        "sqlite-no-dir": f"sqlite:///{root / 'no' / 'such' / 'dir' / 'x.db'}",
        "sqlite-dir": f"sqlite:///{root / 'a-directory'}",
        "postgres-down": f"postgresql://postgres:pw@127.0.0.1:{closed_port}/test",
        "redis-down": f"redis://127.0.0.1:{closed_port}/0",
        "unknown-scheme": "mysql://127.0.0.1/test",
    }[kind]


def _run(command: str, store: str, cwd: Path) -> Done:
    args = [arg.replace("{port}", str(free_port())) for arg in COMMANDS[command]]
    return run_cli(
        *args,
        "--store",
        store,
        cwd=cwd,
        env={"KEEPSTATE_ADMIN_KEY": ADMIN_KEY},
        input=DUMP if command == "import" else "",
    )


def _needles(command: str, kind: str) -> tuple[str, ...]:
    if kind == "unknown-scheme":
        return ("unknown store URL",)
    if command == "serve" and kind == "redis-down":
        return ("need PostgreSQL or SQLite",)
    return {
        "sqlite-no-dir": ("there is no directory", "no/such/dir"),
        "sqlite-dir": ("is a directory",),
        "postgres-down": ("postgresql",),
        "redis-down": ("edis",),  # "redis: Error 111 connecting ..." or "Redis is supported ..." for keys
    }[kind]


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_store_that_cannot_be_opened_is_one_line_and_nothing_is_created(
    tmp_path: Path, command: str, kind: str
) -> None:
    root = tmp_path
    (root / "a-directory").mkdir()
    with closed_port() as closed:  # nothing listens there
        done = _run(command, _store(kind, root, closed), root)
    line = assert_one_line_error(done, *_needles(command, kind))
    assert "pw" not in line, "a password in the store URL was printed"
    assert done.stdout == "", "a command that failed printed something (a key?) on stdout"
    assert sorted(path.name for path in root.iterdir()) == ["a-directory"], "the failed command created files"
    assert list((root / "a-directory").iterdir()) == []
    if kind == "unknown-scheme" or (command == "serve" and kind == "redis-down"):
        assert done.returncode == 2  # bad usage, as for any bad flag


def test_a_driver_error_the_storage_layer_lets_through_is_still_one_line(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """A search_path naming no schema (psycopg's InvalidSchemaName) and a Redis URL with an option
    redis-py does not know (a TypeError): whatever raises them, the command says so in one line."""
    no_schema = pg_url.split("?", 1)[0] + "?options=" + quote(f"-csearch_path=ks_absent_{secrets.token_hex(6)}")
    for store in (no_schema, f"{redis_url}&bogus=1"):
        for command in ("export", "state-ls", "migrate"):
            done = _run(command, store, tmp_path)
            # a command that only reads finds no store there before it meets the driver's error
            reads_nothing_there = store == no_schema and command != "migrate"
            assert_one_line_error(done, "no keepstate store" if reads_nothing_there else "cannot")
    assert list(tmp_path.iterdir()) == []
