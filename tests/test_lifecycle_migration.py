"""A platform store written before queue deadlines existed (schema step 1) opens in this version and
keeps working: its queued runs get the default deadline of 600 s from their last change (so an old
stuck run expires and frees its session, a recent one is still claimed), every other run is as it
was, and the new calls work on it. On SQLite and on PostgreSQL."""

from __future__ import annotations

from claimers import claimer
from keepstate.clock import now_ms
from keepstate.platform import open_platform
from keepstate.stores.records import RunFilter
from platform_steps import OLD_STORES, Row, made_before

OLD_RUN = (
    "INSERT INTO ks_runs (id, env, agent, owner, caller, session_id, end_user, parent_id, status, input, output, "
    "error, hold, decision, idempotency_key, created_at, updated_at) "
    "VALUES (?, 'default', ?, 'k1', 'k1', ?, NULL, NULL, ?, ?, ?, ?, ?, ?, NULL, ?, ?)"
)
OLD_SESSION = "INSERT INTO ks_sessions (env, id, owner, metadata, created_at) VALUES ('default', ?, 'k1', ?, ?)"
OLD_INVOCATION = (
    "INSERT INTO ks_invocations (id, env, run_id, agent, kind, status, created_at) "
    "VALUES (?, 'default', ?, ?, 'start', ?, ?)"
)
ROWS = [  # run id, agent, session, status, updated_at before the test's start
    ("run-stuck", "nobody", "s-old", "queued", 700_000),
    ("run-recent", "chat", None, "queued", 5_000),
    ("run-held", "chat", "s-held", "held", 900_000),
    ("run-done", "chat", None, "done", 900_000),
]


def _rows(now: int) -> list[Row]:
    """The old rows, dated from ``now`` (taken when the test runs: a long suite may start it minutes
    after this module was imported, when a fixed "5 s ago" would already be past the deadline)."""
    rows: list[Row] = [(OLD_SESSION, (session, b"{}", now)) for session in ("s-old", "s-held")]
    for run_id, agent, session, status, ago in ROWS:
        rows.append(
            (OLD_RUN, (run_id, agent, session, status, b"{}", b"1", b"null", b"null", b"null", now - ago, now - ago))
        )
        rows.append((OLD_INVOCATION, (f"inv-{run_id}", run_id, agent, status, now - ago)))
    return rows


@OLD_STORES
async def test_a_store_from_before_deadlines_opens_and_keeps_working(backend_url: str) -> None:
    await made_before(backend_url, 1, _rows(now_ms()))
    platform = await open_platform(backend_url)
    try:
        repo = platform.repo
        stuck, recent = await repo.get_run("default", "run-stuck"), await repo.get_run("default", "run-recent")
        assert stuck is not None and stuck.queue_deadline == stuck.updated_at + 600_000
        assert recent is not None and recent.queue_deadline == recent.updated_at + 600_000
        assert stuck.queue_timeout == 600_000
        assert await repo.expire_queued(now_ms()) == 1
        statuses = {run.id: run.status for run in await repo.list_runs(RunFilter("default", None, None, None, 0, 10))}
        assert statuses == {"run-stuck": "expired", "run-recent": "queued", "run-held": "held", "run-done": "done"}
        worker = await claimer(repo, "default")
        claimed = await repo.claim("default", ["chat", "nobody"], "tok", now_ms() + 30_000, now_ms(), worker)
        assert claimed is not None and claimed.run.id == "run-recent"
        names = {agent.agent: agent.runs for agent in await repo.agent_stats("default")}
        assert names == {"nobody": {"expired": 1}, "chat": {"running": 1, "held": 1, "done": 1}}
        assert await repo.purge_runs(now_ms(), 100) == 2  # the expired one and the old done one
    finally:
        await platform.aclose()
