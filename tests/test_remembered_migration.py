"""Step 9 of the platform's schema: the answers of idempotent writes. A store made before it (step 8, the
previous release's, holding a run) opens in this version, keeps what it held, and a write under an
idempotency key is applied once from then on. On SQLite and on PostgreSQL, through the real migration."""

from __future__ import annotations

from keepstate.platform import open_platform
from keepstate.stores.postgres import platform_sql as pg_steps
from keepstate.stores.remembered import Answer, Memo, Remembered
from keepstate.stores.sql import platform as sql
from keepstate.stores.sql import remembered
from platform_steps import OLD_STORES, made_before

BEFORE = 8
"""The platform's steps before idempotent writes: what the previous release's stores hold."""
RUN = (
    "INSERT INTO ks_runs (id, env, agent, owner, caller, status, input, output, error, hold, decision, "
    "created_at, updated_at) VALUES ('run-old', 'default', 'old', 'k1', 'k1', 'done', ?, ?, ?, ?, ?, 1, 2)",
    (b"{}", b"1", b"null", b"null", b"null"),
)


def test_the_step_follows_the_release_on_both_backends() -> None:
    assert sql.SQLITE_SCHEMA[BEFORE] == remembered.SQLITE_STEP and pg_steps.STEPS[BEFORE] == remembered.PG_STEP
    assert "ks_remembered" not in "".join(sql.SQLITE_SCHEMA[:BEFORE] + list(pg_steps.STEPS[:BEFORE]))


@OLD_STORES
async def test_a_store_from_before_keeps_its_runs_and_remembers_writes_from_now_on(backend_url: str) -> None:
    await made_before(backend_url, BEFORE, [RUN])
    platform = await open_platform(backend_url)
    try:
        old = await platform.repo.get_run("default", "run-old")
        assert old is not None and old.status == "done"
        runs = 0

        async def incr() -> tuple[int, int]:
            nonlocal runs
            runs += 1
            return await platform.state.incr("default/agent/old/", "n", 1)

        memo = Memo("key:k1", "once", b"print", lambda result: Answer(200, b"%d" % result[0]))
        first = await platform.repo.remember(memo, incr)
        again = await platform.repo.remember(memo, incr)
        assert not isinstance(first, Remembered) and first[0] == 1
        assert again == Remembered(b"print", Answer(200, b"1")) and runs == 1
    finally:
        await platform.aclose()
