"""A platform store written before queue deadlines existed (schema step 1) opens in this version and
keeps working: its queued runs get the default deadline of 600 s from their last change (so an old
stuck run expires and frees its session, a recent one is still claimed), every other run is as it
was, and the new calls work on it. On SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from keepstate.clock import now_ms
from keepstate.platform import open_platform
from keepstate.stores.postgres import db as pg_db
from keepstate.stores.postgres import platform_sql as pg_steps
from keepstate.stores.records import RunFilter
from keepstate.stores.sql import platform as sql
from keepstate.stores.sqlite.db import SqliteFile, sqlite_path

OLD_RUN = (
    "INSERT INTO ks_runs (id, env, agent, owner, caller, session_id, end_user, parent_id, status, input, output, "
    "error, hold, decision, idempotency_key, created_at, updated_at) "
    "VALUES (?, 'default', ?, 'k1', 'k1', ?, NULL, NULL, ?, ?, ?, ?, ?, ?, NULL, ?, ?)"
)
OLD_INVOCATION = (
    "INSERT INTO ks_invocations (id, env, run_id, agent, kind, status, created_at) "
    "VALUES (?, 'default', ?, ?, 'start', ?, ?)"
)
NOW = now_ms()
ROWS = [  # run id, agent, session, status, updated_at
    ("run-stuck", "nobody", "s-old", "queued", NOW - 700_000),
    ("run-recent", "chat", None, "queued", NOW - 5_000),
    ("run-held", "chat", "s-held", "held", NOW - 900_000),
    ("run-done", "chat", None, "done", NOW - 900_000),
]


def _rows() -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    return [((run_id, agent, session, status, b"{}", b"1", b"null", b"null", b"null", at, at),
             (f"inv-{run_id}", run_id, agent, status, at))
            for run_id, agent, session, status, at in ROWS]


async def sqlite_step_one(url: str) -> None:
    file = SqliteFile(sqlite_path(url))
    file.migrate("platform", sql.SQLITE_SCHEMA[:1])
    with file.transaction() as conn:
        for session in ("s-old", "s-held"):
            conn.execute("INSERT INTO ks_sessions (env, id, owner, metadata, created_at) VALUES "
                         "('default', ?, 'k1', ?, ?)", (session, b"{}", NOW))
        for run, invocation in _rows():
            conn.execute(OLD_RUN, run)
            conn.execute(OLD_INVOCATION, invocation)
    file.close()


async def postgres_step_one(url: str) -> None:
    pool = await pg_db.open_async_pool(url)
    try:
        await pg_db.amigrate(pool, "platform", pg_steps.STEPS[:1])
        async with pg_db.aconnection(pool) as conn, conn.transaction():
            for session in ("s-old", "s-held"):
                await conn.execute("INSERT INTO ks_sessions (env, id, owner, metadata, created_at) VALUES "
                                   "('default', %s, 'k1', %s, %s)", (session, b"{}", NOW))
            for run, invocation in _rows():
                await conn.execute(pg_steps.pg(OLD_RUN), run)
                await conn.execute(pg_steps.pg(OLD_INVOCATION), invocation)
    finally:
        await pool.close()


@pytest.fixture(params=["sqlite", "postgres"])
def old_store(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue({"sqlite": "sqlite_url", "postgres": "pg_url"}[request.param]))


async def test_a_store_from_before_deadlines_opens_and_keeps_working(old_store: str) -> None:
    await (sqlite_step_one if old_store.startswith("sqlite") else postgres_step_one)(old_store)
    platform = await open_platform(old_store)
    try:
        repo = platform.repo
        stuck, recent = await repo.get_run("default", "run-stuck"), await repo.get_run("default", "run-recent")
        assert stuck is not None and stuck.queue_deadline == stuck.updated_at + 600_000
        assert recent is not None and recent.queue_deadline == recent.updated_at + 600_000
        assert stuck.queue_timeout == 600_000
        assert await repo.expire_queued(now_ms()) == 1
        statuses = {run.id: run.status for run in await repo.list_runs(RunFilter("default", None, None, None, 0, 10))}
        assert statuses == {"run-stuck": "expired", "run-recent": "queued", "run-held": "held", "run-done": "done"}
        claimed = await repo.claim("default", ["chat", "nobody"], "tok", now_ms() + 30_000, now_ms())
        assert claimed is not None and claimed.run.id == "run-recent"
        names = {agent.agent: agent.runs for agent in await repo.agent_stats("default")}
        assert names == {"nobody": {"expired": 1}, "chat": {"running": 1, "held": 1, "done": 1}}
        assert await repo.purge_runs(now_ms(), 100) == 2  # the expired one and the old done one
    finally:
        await platform.aclose()
