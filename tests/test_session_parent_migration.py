"""Step 7 of the platform's schema: sessions gain ``parent`` (the session a fork was made from).

A store made before it (step 6) opens in this version: its sessions read back whole, with ``parent``
None, and a fork made afterwards stores its parent. On SQLite and on PostgreSQL, through the real
migration.
"""

from __future__ import annotations

from keepstate.clock import now_ms
from keepstate.platform import open_platform
from keepstate.stores.postgres import platform_sql as pg_steps
from keepstate.stores.records import StoredSession
from keepstate.stores.sql import platform as sql
from platform_steps import OLD_STORES, made_before

BEFORE = 6
"""The platform's steps before ``parent``: what the previous release's stores hold."""
INSERT_SESSION = (
    "INSERT INTO ks_sessions (env, id, owner, end_user, metadata, created_at) VALUES ('default', ?, 'k1', ?, ?, ?)"
)
SESSIONS = [("s1", "ada", b'{"topic":"x"}'), ("s2", None, b"{}")]


def test_the_step_follows_the_release_and_is_the_same_on_both_backends() -> None:
    assert sql.SQLITE_SCHEMA[BEFORE] == pg_steps.STEPS[BEFORE] == sql.SESSION_PARENT
    assert " parent " not in "".join(sql.SQLITE_SCHEMA[:BEFORE] + list(pg_steps.STEPS[:BEFORE]))
    assert len(sql.SQLITE_SCHEMA) == len(pg_steps.STEPS) > BEFORE


@OLD_STORES
async def test_sessions_from_before_read_back_without_a_parent_and_a_fork_keeps_its(backend_url: str) -> None:
    await made_before(backend_url, BEFORE, [(INSERT_SESSION, (*session, now_ms())) for session in SESSIONS])
    platform = await open_platform(backend_url)
    try:
        old = await platform.repo.get_session("default", "s1")
        assert old is not None and (old.user, old.metadata, old.parent) == ("ada", b'{"topic":"x"}', None)
        listed = await platform.repo.list_sessions("default", None, None, 0, 10)
        assert [(s.id, s.parent) for s in listed] == [("s1", None), ("s2", None)]
        fork = StoredSession("default", "s3", "k1", "ada", b"{}", now_ms(), parent="s1")
        made = await platform.database.fork_session(old, fork, {})
        assert made is not None and made[1] and made[0].parent == "s1"
        again = await platform.repo.get_session("default", "s3")
        assert again is not None and again.parent == "s1"
    finally:
        await platform.aclose()
