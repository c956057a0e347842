"""A command that only reads never creates a store: it refuses, in one line, one that is not there.

``state get``, ``state ls``, ``state delete`` and ``export`` against the default ``./keepstate.db``
in an empty directory, an explicit path, an empty file and a SQLite file that is not a keepstate
store: exit status ≠ 0, one line, and the directory (and the file) exactly as before.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cliproc import assert_one_line_error, run_cli

READERS = {
    "state-get": ["state", "get", "--agent", "a", "--id", "s", "k"],
    "state-ls": ["state", "ls", "--agent", "a", "--id", "s"],
    "state-delete": ["state", "delete", "--agent", "a", "--id", "s", "k"],
    "export": ["export"],
}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("command", list(READERS))
def test_the_default_store_is_not_created_by_a_read(tmp_path: Path, command: str) -> None:
    done = run_cli(*READERS[command], cwd=tmp_path)
    line = assert_one_line_error(done, "no keepstate store at keepstate.db")
    if command.startswith("state"):
        assert json.loads(line)["error"] == "not_found"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", list(READERS))
def test_a_mistyped_path_is_refused_and_not_created(tmp_path: Path, command: str) -> None:
    done = run_cli(*READERS[command], "--store", f"sqlite:///{tmp_path / 'typo.db'}", cwd=tmp_path)
    assert_one_line_error(done, "typo.db", "does not exist")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", list(READERS))
def test_a_file_without_keepstate_tables_is_refused_and_left_as_it_was(tmp_path: Path, command: str) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    with sqlite3.connect(tmp_path / "other.db") as conn:
        conn.execute("CREATE TABLE mine (x)")
    conn.close()
    before = _snapshot(tmp_path)
    for name in ("empty.db", "other.db"):
        done = run_cli(*READERS[command], "--store", f"sqlite:///{tmp_path / name}", cwd=tmp_path)
        assert_one_line_error(done, name, "holds no keepstate tables")
    assert _snapshot(tmp_path) == before


def test_reads_work_on_a_store_that_exists_and_writes_still_create_one(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'new.db'}"
    scope = ["--agent", "a", "--id", "s", "--store", store]
    assert run_cli("state", "put", *scope, "k", "[1]", cwd=tmp_path).returncode == 0  # a write creates it
    got = run_cli("state", "get", *scope, "k", cwd=tmp_path)
    assert (got.returncode, json.loads(got.stdout)) == (0, {"key": "k", "value": [1], "version": 1})
    listed = run_cli("state", "ls", *scope, cwd=tmp_path)
    assert json.loads(listed.stdout) == {"keys": [{"key": "k", "version": 1}]}
    assert run_cli("state", "delete", *scope, "k", cwd=tmp_path).returncode == 0
    exported = run_cli("export", "--store", store, cwd=tmp_path)
    assert exported.returncode == 0 and exported.stderr == ""
    assert sorted(path.name for path in tmp_path.iterdir()) == ["new.db"]
