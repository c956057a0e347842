"""Run events move with export and import (dump format 6) and with a SQLite backup: a dump of SQLite
imported into PostgreSQL holds every run's log as it was, exports back line for line, and its runs go on
counting; a format 5 dump (from before run events) still imports, each run with the events of its status;
a dump holding events newer than their head (an export of a live store) imports with the head past them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from keepstate.clock import now_ms
from keepstate.platform import Platform, open_platform
from keepstate.stores import open_database
from keepstate.stores.records import Outcome, StoredInvocation, StoredKey, StoredRun, StoredSession
from keepstate.transfer import VERSION, export_lines, import_lines

Log = dict[str, list[tuple[int, str, bytes, int]]]
RUNS = ("run-done", "run-held", "run-gone", "run-busy")


def invocation(run_id: str, kind: str = "start") -> StoredInvocation:
    return StoredInvocation(f"inv-{run_id}-{kind}", "default", run_id, "chat", kind, "queued", now_ms())


async def claimed(platform: Platform, run_id: str, session_id: str | None = None) -> StoredInvocation:
    now = now_ms()
    made = StoredRun("default", run_id, "chat", "k1", session_id, None, None, "queued", b"{}", now, now)
    await platform.repo.start_run(made, "k1", invocation(run_id))
    got = await platform.repo.claim("default", ["chat"], f"tok-{run_id}", now_ms() + 600_000, now_ms(), "k1")
    assert got is not None and got.run.id == run_id
    await platform.repo.events.emit(got.invocation.id, f"tok-{run_id}", [("message", b'"hi"')], now_ms(), 100)
    return got.invocation


async def fill(url: str) -> None:
    """A done run, a held one, one whose session went (no events, its head kept) and one running."""
    platform = await open_platform(url)
    try:
        await platform.repo.add_key(StoredKey("k1", "default", "worker", None, now_ms()), "hash-k1")
        done = await claimed(platform, "run-done")
        await platform.repo.finish(done.id, "tok-run-done", Outcome("complete", b'{"a":1}'), now_ms())
        held = await claimed(platform, "run-held")
        await platform.repo.finish(held.id, "tok-run-held", Outcome("hold", b"null"), now_ms())
        await platform.repo.create_session(StoredSession("default", "s1", "k1", None, b"{}", now_ms()))
        gone = await claimed(platform, "run-gone", "s1")
        await platform.repo.finish(gone.id, "tok-run-gone", Outcome("hold", b"null"), now_ms())
        assert await platform.database.delete_session("default", "s1", now_ms()) is not None
        await claimed(platform, "run-busy")
    finally:
        await platform.aclose()


async def logs(url: str) -> Log:
    platform = await open_platform(url)
    try:
        return {
            run_id: [(e.seq, e.type, e.data, e.at) for e in await platform.repo.events.read(run_id, 0, 100)]
            for run_id in RUNS
        }
    finally:
        await platform.aclose()


async def dump(url: str) -> list[bytes]:
    return [line async for line in export_lines(url)]


async def records(url: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in await dump(url)]


async def test_run_events_move_with_export_and_import_and_their_runs_go_on(tmp_path: Path, pg_url: str) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    await fill(source)
    before = await logs(source)
    assert [kind for _, kind, _, _ in before["run-done"]] == ["run.status"] * 2 + [
        "message",
        "run.output",
        "run.status",
    ]
    assert before["run-gone"] == [] and len(before["run-held"]) == 4
    lines = await dump(source)
    assert orjson.loads(lines[0])["version"] == VERSION == 6
    rows = [orjson.loads(line) for line in lines if b'"ks_run_events"' in line]
    assert len(rows) == 5 + 4 + 3 and all("id" not in row["row"] for row in rows)  # SQLite's cursor stays home
    await import_lines(pg_url, lines)
    assert await logs(pg_url) == before
    assert await dump(pg_url) == lines
    platform = await open_platform(pg_url)
    try:  # the imported runs count on from where they were
        resume = invocation("run-held", "resume")
        assert await platform.repo.decide("default", "run-held", b"{}", resume, now_ms()) is not None
        emitted = await platform.repo.events.emit(
            "inv-run-busy-start", "tok-run-busy", [("message", b"1")], now_ms(), 100
        )
        assert emitted is not None and emitted.seq == 4
    finally:
        await platform.aclose()
    assert [seq for seq, _, _, _ in (await logs(pg_url))["run-held"]] == [1, 2, 3, 4, 5]


async def test_a_format_5_dump_imports_each_run_with_the_events_of_its_status(tmp_path: Path) -> None:
    source, target = f"sqlite:///{tmp_path / 'source.db'}", f"sqlite:///{tmp_path / 'target.db'}"
    await fill(source)
    older = [
        record for record in await records(source) if record.get("table") not in ("ks_event_heads", "ks_run_events")
    ]
    older[0]["version"], older[-1]["records"] = 5, len(older) - 2  # as the release before wrote it
    await import_lines(target, [orjson.dumps(record) for record in older])
    found = await logs(target)
    assert [(seq, kind, data) for seq, kind, data, _ in found["run-done"]] == [
        (1, "run.output", b'{"output":{"a":1}}'),
        (2, "run.status", b'{"status":"done"}'),
    ]
    assert [data for _, _, data, _ in found["run-held"]] == [b'{"status":"held"}']
    assert [data for _, _, data, _ in found["run-gone"]] == [b'{"status":"cancelled"}']
    assert [data for _, _, data, _ in found["run-busy"]] == [b'{"status":"running"}']


async def test_events_newer_than_their_head_import_with_the_head_past_them(tmp_path: Path) -> None:
    source, target = f"sqlite:///{tmp_path / 'source.db'}", f"sqlite:///{tmp_path / 'target.db'}"
    await fill(source)
    behind = await records(source)
    for record in behind:
        if record.get("table") == "ks_event_heads" and record["row"]["run_id"] == "run-busy":
            record["row"]["last_seq"] = 1  # read before the run's last events were written
    await import_lines(target, [orjson.dumps(record) for record in behind])
    platform = await open_platform(target)
    try:
        emitted = await platform.repo.events.emit(
            "inv-run-busy-start", "tok-run-busy", [("message", b"1")], now_ms(), 100
        )
        assert emitted is not None and emitted.seq == 4
    finally:
        await platform.aclose()


async def test_a_sqlite_backup_holds_the_events(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    await fill(source)
    database = open_database(source)
    try:
        database.backup(source, str(tmp_path / "copy.db"), replace=False)
    finally:
        await database.aclose()
    assert await logs(f"sqlite:///{tmp_path / 'copy.db'}") == await logs(source)
