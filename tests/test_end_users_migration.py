"""A platform store from before end users had a member key (schema step 4) gets them from its sessions.

Each end user named in a member's session goes to the member of its oldest such session; sessions of
admins and of embedded apps bind nobody. On SQLite and on PostgreSQL, through the real migration.
"""

from __future__ import annotations

from keepstate.clock import now_ms
from keepstate.platform import open_platform
from keepstate.stores.postgres import platform_sql as pg_steps
from keepstate.stores.sql import platform as sql
from platform_steps import OLD_STORES, made_before

BEFORE = 4
"""The platform's steps before end users: what the previous release's stores hold."""
KEYS = [("key_m1", "member", "h1"), ("key_m2", "member", "h2"), ("key_a", "admin", "h3")]
SESSIONS = [  # in the order made: (id, owner, user)
    ("s1", "key_a", "ada"),  # an admin's: binds nobody
    ("s2", "key_m2", "ada"),  # ada's oldest member session: key_m2
    ("s3", "key_m1", "ada"),
    ("s4", "key_m1", "bob"),
    ("s5", "", "cy"),  # an embedded app's (no key)
]
INSERT_KEY = "INSERT INTO ks_keys (id, env, role, name, created_at, secret_hash) VALUES (?, 'default', ?, NULL, 1, ?)"
INSERT_SESSION = (
    "INSERT INTO ks_sessions (env, id, owner, end_user, metadata, created_at) VALUES ('default', ?, ?, ?, ?, ?)"
)


def _rows() -> list[tuple[str, tuple[object, ...]]]:
    keys = [(INSERT_KEY, key) for key in KEYS]
    return keys + [(INSERT_SESSION, (*session, b"{}", now_ms())) for session in SESSIONS]


def test_the_end_users_step_comes_fifth_and_leaves_the_steps_before_alone() -> None:
    assert sql.SQLITE_SCHEMA[BEFORE] == pg_steps.STEPS[BEFORE] == sql.END_USERS_TABLE
    assert len(sql.SQLITE_SCHEMA) == len(pg_steps.STEPS) > BEFORE
    assert "ks_end_users" not in "".join(sql.SQLITE_SCHEMA[:BEFORE] + list(pg_steps.STEPS[:BEFORE]))


@OLD_STORES
async def test_each_end_user_goes_to_the_member_of_its_oldest_session(backend_url: str) -> None:
    await made_before(backend_url, BEFORE, _rows())
    platform = await open_platform(backend_url)
    try:
        repo = platform.repo
        assert await repo.bind_user("default", "ada", "key_m1") == "key_m2"
        assert await repo.bind_user("default", "bob", "key_m2") == "key_m1"
        assert await repo.bind_user("default", "cy", "key_m2") == "key_m2"  # nobody had it: the first to ask
        assert await repo.bind_user("other", "ada", "key_m1") == "key_m1"  # another environment's ada
    finally:
        await platform.aclose()
