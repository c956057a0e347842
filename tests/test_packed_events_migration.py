"""Step 10 of the platform's schema: an emit's events in one row (``sql/event_rows.py``). A store made
before it (step 9), whose worker wrote a row per event, opens in this version with its logs read as they
were, from any ``after``; its running invocation emits on, each emit one row, and the log reads whole,
old rows and new, in ``seq`` order. On SQLite and on PostgreSQL, through the real migration."""

from __future__ import annotations

import orjson

from keepstate.platform import open_platform
from keepstate.stores.postgres import platform_sql as pg_steps
from keepstate.stores.sql import events
from keepstate.stores.sql import platform as sql
from keepstate.transfer import export_lines
from platform_steps import OLD_STORES, made_before

BEFORE = 9
"""The platform's steps before packed events: what a store of the previous version holds."""
RUN = (
    "INSERT INTO ks_runs (id, env, agent, owner, caller, status, input, output, error, hold, decision, "
    "created_at, updated_at) VALUES ('run-old', 'default', 'old', 'k1', 'k1', 'running', ?, ?, ?, ?, ?, 1, 100)"
)
INVOCATION = (
    "INSERT INTO ks_invocations (id, env, run_id, agent, kind, status, token_hash, lease_until, created_at) "
    "VALUES ('inv-old', 'default', 'run-old', 'old', 'start', 'running', 'hash-old', 9000000000000, 1)"
)
EVENT = "INSERT INTO ks_run_events (run_id, seq, type, data, at) VALUES ('run-old', ?, ?, ?, 200)"
OLD = [(2, "message", b'"a"'), (3, "tool.call", b'{"n":1}'), (4, "message", b"[1,2]")]
"""A worker's events as step 8's emit wrote them, after the run's ``run.status`` (1, by the trigger)."""
HEAD = "UPDATE ks_event_heads SET last_seq = 4 WHERE run_id = 'run-old'"


def test_the_step_follows_the_release_on_both_backends() -> None:
    assert sql.SQLITE_SCHEMA[BEFORE] == events.SQLITE_PACKED_STEP
    assert pg_steps.STEPS[BEFORE] == events.PG_PACKED_STEP
    assert "sizes" not in "".join(sql.SQLITE_SCHEMA[:BEFORE] + list(pg_steps.STEPS[:BEFORE]))


@OLD_STORES
async def test_a_log_of_rows_per_event_reads_as_it_was_and_goes_on_packed(backend_url: str) -> None:
    old_rows = [(EVENT, row) for row in OLD]
    await made_before(backend_url, BEFORE, [(RUN, (b"{}", *[b"null"] * 4)), (INVOCATION, ()), *old_rows, (HEAD, ())])
    platform = await open_platform(backend_url)
    try:
        log = platform.repo.events
        written = [(1, "run.status", b'{"status":"running"}'), *OLD]
        assert [(e.seq, e.type, e.data) for e in await log.read("run-old", 0, 10)] == written
        assert [e.seq for e in await log.read("run-old", 2, 2)] == [3, 4]
        emitted = await log.emit(
            "inv-old", "hash-old", [("message", b"5"), ("note", b"6"), ("message", b"7")], 300, 100
        )
        assert emitted is not None and emitted.seq == 7
        emitted = await log.emit("inv-old", "hash-old", [("message", b"8"), ("message", b"9")], 400, 100)
        assert emitted is not None and emitted.seq == 9
        later = [
            (5, "message", b"5"),
            (6, "note", b"6"),
            (7, "message", b"7"),
            (8, "message", b"8"),
            (9, "message", b"9"),
        ]
        assert [(e.seq, e.type, e.data) for e in await log.read("run-old", 0, 100)] == written + later
        assert [e.seq for e in await log.read("run-old", 3, 3)] == [4, 5, 6]  # from an old row into a packed one
        assert [e.seq for e in await log.read("run-old", 5, 3)] == [6, 7, 8]  # from inside one packed row on
        assert [e.at for e in await log.read("run-old", 4, 10)] == [300, 300, 300, 400, 400]
    finally:
        await platform.aclose()
    dumped = [orjson.loads(line) for line in [line async for line in export_lines(backend_url)]]
    rows = [record["row"] for record in dumped if record.get("table") == "ks_run_events"]
    assert [(row["seq"], row["sizes"], row["types"]) for row in rows] == [
        (1, None, None),
        (2, None, None),
        (3, None, None),
        (4, None, None),
        (7, "1,1,1", '["message","note","message"]'),
        (9, "1,1", None),
    ]
