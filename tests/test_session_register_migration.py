"""A platform store written before registered session agents existed (schema step 2, the last one
released without ``ks_session_agents``) opens in this version and keeps working: its sessions and
runs are as they were, an embedded store registers an agent in one of its old sessions, and a delete
drops the state of the old run's agent and of the registered one. On SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import keepstate
from keepstate.clock import now_ms
from keepstate.platform import open_platform
from keepstate.stores.postgres import platform_sql as pg_steps
from keepstate.stores.records import namespace
from keepstate.stores.sql import platform as sql
from platform_steps import OLD_STORES, made_before

NOW = now_ms()
OLD_SESSION = (
    "INSERT INTO ks_sessions (env, id, owner, end_user, metadata, created_at) VALUES ('default', ?, 'k1', 'ada', ?, ?)"
)
OLD_RUN = (
    "INSERT INTO ks_runs (id, env, agent, owner, caller, session_id, status, input, output, error, hold, decision, "
    "created_at, updated_at) VALUES ('run-old', 'default', 'worker', 'k1', 'k1', 'old', 'done', ?, ?, ?, ?, ?, ?, ?)"
)
SESSION_VALUES: tuple[Any, ...] = ("old", b'{"topic":"before"}', NOW)
RUN_VALUES: tuple[Any, ...] = (b"{}", b"1", b"null", b"null", b"null", NOW, NOW)
RELEASED = 2
"""The platform's steps before this one: what a store made by the previous release holds."""


def test_the_migration_appends_one_step_and_leaves_the_released_ones_as_they_were() -> None:
    assert len(sql.SQLITE_SCHEMA) == len(pg_steps.STEPS) > RELEASED
    assert sql.SQLITE_SCHEMA[RELEASED] == pg_steps.STEPS[RELEASED] == sql.SESSION_AGENTS_TABLE
    assert "ks_session_agents" not in "".join(sql.SQLITE_SCHEMA[:RELEASED] + list(pg_steps.STEPS[:RELEASED]))
    assert "ks_session_agents" in sql.SQLITE_SCHEMA[RELEASED] and "ks_session_agents" in pg_steps.STEPS[RELEASED]


@OLD_STORES
async def test_a_store_from_before_registered_agents_opens_and_keeps_working(backend_url: str) -> None:
    await made_before(backend_url, RELEASED, [(OLD_SESSION, SESSION_VALUES), (OLD_RUN, RUN_VALUES)])
    with keepstate.open(backend_url) as store:  # the old run's state, then an embedded app's
        store.scope("session", agent="worker", id="old").put("notes", {"from": "the run"})
        assert store.register_session("old", "embedded", user="someone-else", metadata={"replaced": True})
        store.scope("session", agent="embedded", id="old").append("history", [{"role": "user", "content": "hi"}])

    platform = await open_platform(backend_url)
    try:
        repo = platform.repo
        old = await repo.get_session("default", "old")
        assert old is not None and (old.owner, old.user, old.metadata) == ("k1", "ada", b'{"topic":"before"}')
        run = await repo.get_run("default", "run-old")
        assert run is not None and (run.status, run.session_id) == ("done", "old")
        assert await repo.session_agents("default", "old") == ["embedded", "worker"]
        assert await platform.database.delete_session("default", "old", now_ms()) == ["embedded", "worker"]
        state = await platform.database.state()
        for agent in ("embedded", "worker"):
            assert await state.keys(namespace("default", "session", agent, "old")) == []
    finally:
        await platform.aclose()
