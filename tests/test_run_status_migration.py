"""Step 4 of the platform's schema: runs by status, newest first, indexed (the console counts the held
runs waiting for a person on every page). A store made before it (step 3) opens in this version, gains
the indexes, and lists its held runs as before; on SQLite the listings of one status use them."""

from __future__ import annotations

import sqlite3
from typing import Any

from keepstate.clock import now_ms
from keepstate.platform import open_platform
from keepstate.stores.postgres import platform_sql as pg_steps
from keepstate.stores.records import RunFilter
from keepstate.stores.sql import platform as sql
from keepstate.stores.sqlite.db import sqlite_path
from platform_steps import OLD_STORES, made_before

BEFORE = 5
"""The platform's steps before the run-status indexes: what the previous release's stores hold."""
INDEXES = {"ks_runs_status", "ks_runs_owner_status"}
RUN = (
    "INSERT INTO ks_runs (id, env, agent, owner, caller, status, input, output, error, hold, decision, "
    "created_at, updated_at) VALUES (?, 'default', 'a', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
RUNS = [(f"run-{n}", f"k{n % 2}", f"k{n % 2}", "held" if n % 3 == 0 else "done") for n in range(12)]


def values(run: tuple[str, str, str, str]) -> tuple[Any, ...]:
    return (*run, b"{}", b"null", b"null", b'{"q":1}', b"null", now_ms(), now_ms())


def test_the_step_follows_the_release_and_is_the_same_on_both_backends() -> None:
    assert sql.SQLITE_SCHEMA[BEFORE] == pg_steps.STEPS[BEFORE] == sql.RUN_STATUS_INDEXES
    assert len(sql.SQLITE_SCHEMA) == len(pg_steps.STEPS) > BEFORE


@OLD_STORES
async def test_a_store_from_before_gains_the_indexes_and_lists_its_held_runs(backend_url: str) -> None:
    await made_before(backend_url, BEFORE, [(RUN, values(run)) for run in RUNS])
    platform = await open_platform(backend_url)
    try:
        held = await platform.repo.list_runs(RunFilter("default", None, None, "held", 0, 10, desc=True))
        assert [run.id for run in held] == [run[0] for run in reversed(RUNS) if run[3] == "held"]
        mine = await platform.repo.list_runs(RunFilter("default", "k1", None, "held", 0, 10, desc=True))
        assert [run.id for run in mine] == [run[0] for run in reversed(RUNS) if run[3] == "held" and run[1] == "k1"]
    finally:
        await platform.aclose()
    if backend_url.startswith("sqlite"):
        assert sqlite_indexes(backend_url) >= INDEXES
        assert_plans_use_the_indexes(backend_url)


def sqlite_indexes(url: str) -> set[str]:
    with sqlite3.connect(sqlite_path(url)) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


def assert_plans_use_the_indexes(url: str) -> None:
    with sqlite3.connect(sqlite_path(url)) as conn:
        for owner, index in ((None, "ks_runs_status"), ("k1", "ks_runs_owner_status")):
            statement, params = sql.list_runs(RunFilter("default", owner, None, "held", 0, 100, desc=True))
            plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}", params))
            assert f"USING INDEX {index}" in plan and "TEMP B-TREE" not in plan, plan
