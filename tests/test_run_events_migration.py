"""Step 8 of the platform's schema: run events. A store made before it (step 7) opens in this version and
every run it holds gets the events of its present status, stamped with its last change — a ``run.status``,
after a ``run.output`` when done — so its log exists and a reader of a finished run sees it end; a run
that moves on afterwards counts on from there. On SQLite and on PostgreSQL, through the real migration."""

from __future__ import annotations

from keepstate.platform import open_platform
from keepstate.stores.postgres import platform_sql as pg_steps
from keepstate.stores.records import StoredInvocation
from keepstate.stores.sql import events
from keepstate.stores.sql import platform as sql
from platform_steps import OLD_STORES, made_before

BEFORE = 7
"""The platform's steps before run events: what the previous release's stores hold."""
RUN = (
    "INSERT INTO ks_runs (id, env, agent, owner, caller, status, input, output, error, hold, decision, "
    "created_at, updated_at) VALUES (?, 'default', 'old', 'k1', 'k1', ?, ?, ?, ?, ?, ?, 1, ?)"
)
RUNS = [
    ("run-queued", "queued", b"{}", b"null", 100),
    ("run-held", "held", b"{}", b"null", 200),
    ("run-done", "done", b"{}", b'{"answer":[1,"two"]}', 300),
    ("run-failed", "failed", b"{}", b"null", 400),
]


def test_the_step_follows_the_release_on_both_backends() -> None:
    assert sql.SQLITE_SCHEMA[BEFORE] == events.SQLITE_STEP and pg_steps.STEPS[BEFORE] == events.PG_STEP
    assert "ks_run_events" not in "".join(sql.SQLITE_SCHEMA[:BEFORE] + list(pg_steps.STEPS[:BEFORE]))
    assert len(sql.SQLITE_SCHEMA) == len(pg_steps.STEPS) > BEFORE


@OLD_STORES
async def test_runs_from_before_get_the_events_of_their_status_and_count_on(backend_url: str) -> None:
    await made_before(backend_url, BEFORE, [(RUN, (*row[:4], b"null", b"null", b"null", row[4])) for row in RUNS])
    platform = await open_platform(backend_url)
    try:
        found = {
            run_id: [(e.seq, e.type, e.data, e.at) for e in await platform.repo.events.read(run_id, 0, 10)]
            for run_id, *_ in RUNS
        }
        assert found == {
            "run-queued": [(1, "run.status", b'{"status":"queued"}', 100)],
            "run-held": [(1, "run.status", b'{"status":"held"}', 200)],
            "run-done": [
                (1, "run.output", b'{"output":{"answer":[1,"two"]}}', 300),
                (2, "run.status", b'{"status":"done"}', 300),
            ],
            "run-failed": [(1, "run.status", b'{"status":"failed"}', 400)],
        }
        resume = StoredInvocation("inv-resume", "default", "run-held", "old", "resume", "queued", 500)
        assert await platform.repo.decide("default", "run-held", b"{}", resume, 500) is not None
        assert [e.seq for e in await platform.repo.events.read("run-held", 0, 10)] == [1, 2]
    finally:
        await platform.aclose()
