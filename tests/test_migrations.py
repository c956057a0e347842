"""Schema migrations: applied once, safe when run twice, concurrently, or after a failure."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

import keepstate
from keepstate.stores.sqlite import state as sqlite_store
from keepstate.stores.sqlite.db import SqliteFile

STEPS = ["CREATE TABLE t1 (a INTEGER)", "CREATE TABLE t2 (b INTEGER); INSERT INTO t2 VALUES (1)"]


def _version(path: Path, component: str) -> int:
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT version FROM keepstate_schema WHERE component = ?", (component,)).fetchone()
    return int(row[0]) if row else 0


def test_migrating_twice_applies_each_step_once(tmp_path: Path) -> None:
    db = SqliteFile(str(tmp_path / "m.db"))
    db.migrate("demo", STEPS)
    db.migrate("demo", STEPS)
    assert _version(tmp_path / "m.db", "demo") == 2
    assert db.read(lambda c: c.execute("SELECT count(*) FROM t2").fetchone()[0]) == 1
    db.close()


def test_a_failed_step_leaves_nothing_half_applied(tmp_path: Path) -> None:
    db = SqliteFile(str(tmp_path / "m.db"))
    db.migrate("demo", STEPS[:1])
    with pytest.raises(sqlite3.OperationalError):
        db.migrate("demo", [*STEPS, "CREATE TABLE t3 (c INTEGER); THIS IS NOT SQL"])
    assert _version(tmp_path / "m.db", "demo") == 1
    tables = db.read(lambda c: [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")])
    assert "t2" not in tables and "t3" not in tables
    db.migrate("demo", [*STEPS, "CREATE TABLE t3 (c INTEGER)"])
    assert _version(tmp_path / "m.db", "demo") == 3
    db.close()


def test_a_store_newer_than_this_code_is_refused_clearly(tmp_path: Path) -> None:
    db = SqliteFile(str(tmp_path / "m.db"))
    db.migrate("demo", STEPS)
    with pytest.raises(RuntimeError, match="newer than this keepstate knows"):
        db.migrate("demo", STEPS[:1])
    db.close()


def _open_and_write(url: str, worker: int) -> None:
    with keepstate.open(url) as store:
        store.scope("agent", agent="a").put(f"k{worker}", worker)


def test_processes_opening_a_fresh_file_at_once_all_succeed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=_open_and_write, args=(url, n)) for n in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0, 0, 0, 0]
    assert _version(tmp_path / "fresh.db", sqlite_store.COMPONENT) == len(sqlite_store.STEPS)
    with keepstate.open(url) as store:
        assert sorted(key for key, _ in store.scope("agent", agent="a").keys()) == ["k0", "k1", "k2", "k3"]
