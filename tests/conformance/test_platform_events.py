"""Run event logs (``PlatformFacet.events``) on every store that declares a platform.

The facet is driven directly (the helpers are ``test_platform_repo.py``'s), so what is proven is the
store's part: ``seq`` 1, 2, 3... per run across its invocations, a ``run.status`` event written with
every status change whichever call makes it (claims, finishes, sweeps, cancels, decisions, revocations,
a session's delete), a worker's emit atomic with its limit, events gone with their run (a purge) and
their session, and ``follow`` waking for a run's new events. The races fire calls at once with
``asyncio.gather`` (on PostgreSQL each on its own pooled connection). No test branches on the backend.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import orjson
import pytest
from test_platform_repo import ENV, claim, new_run, session, start, start_inv, uid

from backends import declaring
from event_sinks import following
from keepstate.clock import now_ms
from keepstate.errors import TooLarge
from keepstate.stores.base import Database, PlatformFacet
from keepstate.stores.records import Claimed, Outcome, StoredEvent, StoredKey, StoredRun

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
CAP = 10_000


async def log_of(repo: PlatformFacet, run_id: str) -> list[tuple[int, str, object]]:
    return [(e.seq, e.type, orjson.loads(e.data)) for e in await repo.events.read(run_id, 0, 100_000)]


def statuses(log: list[tuple[int, str, object]]) -> list[object]:
    return [data["status"] for _, kind, data in log if kind == "run.status" and isinstance(data, dict)]


async def running(repo: PlatformFacet, agent: str) -> tuple[StoredRun, Claimed]:
    """A new run of ``agent``, claimed."""
    run, _ = await start(repo, new_run(agent))
    claimed = await claim(repo, agent, token=uid("tok"))
    assert claimed is not None and claimed.run.id == run.id
    return run, claimed


async def emit(repo: PlatformFacet, claimed: Claimed, *data: object, kind: str = "message", cap: int = CAP) -> int:
    events = [(kind, orjson.dumps(item)) for item in data]
    emitted = await repo.events.emit(claimed.invocation.id, claimed.invocation.token_hash or "", events, now_ms(), cap)
    assert emitted is not None
    return emitted.seq


# ---------------------------------------------------------------- the platform's events


async def test_a_run_through_hold_and_resume_logs_each_status_and_its_output(repo: PlatformFacet) -> None:
    run, first = await running(repo, "ev-life")
    assert await emit(repo, first, "a", {"b": 1}) == 4
    await repo.finish(first.invocation.id, first.invocation.token_hash or "", Outcome("hold", b'{"q":1}'), now_ms())
    assert await repo.decide(ENV, run.id, b"{}", start_inv(run, "resume"), now_ms()) is not None
    second = await claim(repo, "ev-life", token=uid("tok"))
    assert second is not None and second.invocation.kind == "resume"
    assert await emit(repo, second, "c") == 8  # a resume goes on counting
    await repo.finish(second.invocation.id, second.invocation.token_hash or "", Outcome("complete", b'{"x":[1]}'), 5)
    assert await log_of(repo, run.id) == [
        (1, "run.status", {"status": "queued"}),
        (2, "run.status", {"status": "running"}),
        (3, "message", "a"),
        (4, "message", {"b": 1}),
        (5, "run.status", {"status": "held"}),
        (6, "run.status", {"status": "queued"}),
        (7, "run.status", {"status": "running"}),
        (8, "message", "c"),
        (9, "run.output", {"output": {"x": [1]}}),
        (10, "run.status", {"status": "done"}),
    ]
    events = await repo.events.read(run.id, 0, 100)
    assert events[-1].ends and not any(event.ends for event in events[:-1])
    assert events[-1].at == 5 and all(event.at > 5 for event in events[:-2])  # the change's own time


async def test_a_failed_a_cancelled_and_a_requested_cancel_each_log_their_status(repo: PlatformFacet) -> None:
    failed, claimed = await running(repo, "ev-fail")
    await repo.finish(claimed.invocation.id, claimed.invocation.token_hash or "", Outcome("fail", b"{}"), now_ms())
    assert statuses(await log_of(repo, failed.id)) == ["queued", "running", "failed"]
    queued, _ = await start(repo, new_run("ev-cancel"))
    await repo.cancel(ENV, queued.id, now_ms())
    await repo.cancel(ENV, queued.id, now_ms())  # no change, no event
    assert statuses(await log_of(repo, queued.id)) == ["queued", "cancelled"]
    asked, claimed = await running(repo, "ev-ask")
    await repo.cancel(ENV, asked.id, now_ms())  # a request: the status stays running
    assert statuses(await log_of(repo, asked.id)) == ["queued", "running"]
    await repo.finish(claimed.invocation.id, claimed.invocation.token_hash or "", Outcome("fail", b"{}"), now_ms())
    assert statuses(await log_of(repo, asked.id)) == ["queued", "running", "cancelled"]


async def test_a_double_text_that_interrupts_logs_the_runs_it_cancels(repo: PlatformFacet) -> None:
    """``multitask="interrupt"`` cancels the session's queued run and asks its running one to stop: the
    queued run's log ends ``cancelled``, the running one's says nothing until its worker ends it."""
    sid = await session(repo)
    first = new_run("ev-dt", sid)
    await repo.start_run(first, "k1", start_inv(first))
    claimed = await claim(repo, "ev-dt", token=uid("tok"))
    assert claimed is not None and claimed.run.id == first.id
    waiting = new_run("ev-dt", sid)
    await repo.start_run(waiting, "k1", start_inv(waiting), "enqueue")
    newest = new_run("ev-dt", sid)
    await repo.start_run(newest, "k1", start_inv(newest), "interrupt")
    assert statuses(await log_of(repo, waiting.id)) == ["queued", "cancelled"]
    assert statuses(await log_of(repo, first.id)) == ["queued", "running"]
    await repo.finish(claimed.invocation.id, claimed.invocation.token_hash or "", Outcome("fail", b"{}"), now_ms())
    assert statuses(await log_of(repo, first.id)) == ["queued", "running", "cancelled"]
    assert statuses(await log_of(repo, newest.id)) == ["queued"]


async def test_the_sweeps_and_a_revocation_log_the_status_they_give(repo: PlatformFacet) -> None:
    lost, _ = await start(repo, new_run("ev-lost"))
    assert await claim(repo, "ev-lost", lease_ms=-1_000) is not None
    assert await repo.expire(now_ms()) == 1
    assert statuses(await log_of(repo, lost.id)) == ["queued", "running", "interrupted"]
    late = replace(new_run("ev-late"), queue_deadline=now_ms() - 60_000)
    await repo.start_run(late, "k1", replace(start_inv(late), queue_deadline=late.queue_deadline))
    assert await repo.expire_queued(now_ms()) == 1
    assert statuses(await log_of(repo, late.id)) == ["queued", "expired"]
    key = StoredKey(uid("key"), ENV, "worker", "w", now_ms())
    await repo.add_key(key, uid("hash"))
    held, _ = await start(repo, new_run("ev-revoked"))
    assert await repo.claim(ENV, ["ev-revoked"], uid("tok"), now_ms() + 30_000, now_ms(), key.id) is not None
    assert await repo.revoke_key(ENV, key.id, now_ms()) == [held.id]
    assert statuses(await log_of(repo, held.id)) == ["queued", "running", "interrupted"]


async def test_a_turn_expiring_its_sessions_overdue_run_logs_it(repo: PlatformFacet) -> None:
    sid = await session(repo)
    late = replace(new_run("ev-turn", sid), queue_deadline=now_ms() - 60_000)
    await repo.start_run(late, "k1", replace(start_inv(late), queue_deadline=late.queue_deadline))
    await start(repo, new_run("ev-turn", sid))  # the overdue run no longer blocks: it expires here
    assert statuses(await log_of(repo, late.id)) == ["queued", "expired"]


async def test_a_deleted_session_takes_its_runs_events_and_its_held_run_is_cancelled(
    repo: PlatformFacet, database: Database
) -> None:
    sid = await session(repo)
    run, _ = await start(repo, new_run("ev-gone", sid))
    claimed = await claim(repo, "ev-gone", token=uid("tok"))
    assert claimed is not None
    await emit(repo, claimed, "kept until the session goes")
    await repo.finish(claimed.invocation.id, claimed.invocation.token_hash or "", Outcome("hold", b"null"), now_ms())
    other, _ = await start(repo, new_run("ev-stays"))
    assert len(await log_of(repo, run.id)) == 4
    assert await database.delete_session(ENV, sid, now_ms()) == ["ev-gone"]
    found = await repo.get_run(ENV, run.id)
    assert found is not None and found.status == "cancelled"
    assert await log_of(repo, run.id) == []
    assert statuses(await log_of(repo, other.id)) == ["queued"]


async def test_a_purged_run_takes_its_events(repo: PlatformFacet) -> None:
    run, claimed = await running(repo, "ev-purge")
    await emit(repo, claimed, *range(5))
    await repo.finish(claimed.invocation.id, claimed.invocation.token_hash or "", Outcome("complete", b"1"), now_ms())
    kept, _ = await start(repo, new_run("ev-kept"))
    assert await repo.purge_runs(now_ms() + 1_000, 100) == 1
    assert await log_of(repo, run.id) == []
    assert statuses(await log_of(repo, kept.id)) == ["queued"]


# ---------------------------------------------------------------- the worker's emit


async def test_an_emit_answers_its_last_seq_and_the_cancel_request(repo: PlatformFacet) -> None:
    run, claimed = await running(repo, "ev-emit")
    hashed = claimed.invocation.token_hash or ""
    emitted = await repo.events.emit(claimed.invocation.id, hashed, [("tool.call", b'{"n":1}')], now_ms(), CAP)
    assert emitted is not None and (emitted.seq, emitted.cancel_requested) == (3, False)
    await repo.cancel(ENV, run.id, now_ms())
    emitted = await repo.events.emit(claimed.invocation.id, hashed, [("message", b"2"), ("message", b"3")], 9, CAP)
    assert emitted is not None and (emitted.seq, emitted.cancel_requested) == (5, True)
    assert [(e.seq, e.type, e.data) for e in await repo.events.read(run.id, 2, 10)] == [
        (3, "tool.call", b'{"n":1}'),
        (4, "message", b"2"),
        (5, "message", b"3"),
    ]
    assert [e.at for e in await repo.events.read(run.id, 3, 10)] == [9, 9]
    assert [e.seq for e in await repo.events.read(run.id, 1, 2)] == [2, 3]
    assert await repo.events.read(run.id, 5, 10) == []
    assert await repo.events.read("run_none", 0, 10) == []


async def test_an_emits_types_and_data_come_back_byte_for_byte(repo: PlatformFacet) -> None:
    """Whatever a store does to keep an emit's events together (the SQL stores: one row) leaves them as
    they were, one byte or 64 KiB, odd types and all; the facet takes more events than the route allows
    (its callers' limit), in order; and a read may start and stop anywhere inside an emit."""
    run, claimed = await running(repo, "ev-bytes")
    kinds = ["message", "NULL", "", 'a "quoted", {braced} one', "back\\slash\\", "é ü 😀", "x" * 64]
    data = [
        b'"NULL"',
        b"null",
        b'{"a":"\\"\\\\\\u0000,{}"}',
        '["é 😀"]'.encode(),
        b"0",
        b'"' + b"x" * 65_534 + b'"',
        b"[]",
    ]
    hashed = claimed.invocation.token_hash or ""
    emitted = await repo.events.emit(claimed.invocation.id, hashed, list(zip(kinds, data, strict=True)), now_ms(), CAP)
    assert emitted is not None and emitted.seq == 9
    assert [(e.type, e.data) for e in await repo.events.read(run.id, 2, 10)] == list(zip(kinds, data, strict=True))
    many = [("message", orjson.dumps(n)) for n in range(250)]
    emitted = await repo.events.emit(claimed.invocation.id, hashed, many, now_ms(), CAP)
    assert emitted is not None and emitted.seq == 259
    assert [(e.seq, e.data) for e in await repo.events.read(run.id, 9, 1000)] == [
        (10 + n, data) for n, (_, data) in enumerate(many)
    ]
    assert [e.seq for e in await repo.events.read(run.id, 5, 6)] == [6, 7, 8, 9, 10, 11]
    assert [e.seq for e in await repo.events.read(run.id, 120, 3)] == [121, 122, 123]
    assert [e.seq for e in await repo.events.read(run.id, 258, 10)] == [259]
    assert await repo.events.read(run.id, 259, 10) == []


async def test_only_a_live_invocation_emits(repo: PlatformFacet) -> None:
    run, claimed = await running(repo, "ev-dead")
    inv, hashed = claimed.invocation.id, claimed.invocation.token_hash or ""
    assert await repo.events.emit(inv, "another-token", [("message", b"1")], now_ms(), CAP) is None
    assert await repo.events.emit("inv_none", hashed, [("message", b"1")], now_ms(), CAP) is None
    assert await repo.events.emit(inv, hashed, [("message", b"1")], now_ms() + 3_600_000, CAP) is None  # lease over
    await repo.finish(inv, hashed, Outcome("hold", b"null"), now_ms())
    assert await repo.events.emit(inv, hashed, [("message", b"1")], now_ms(), CAP) is None
    await repo.decide(ENV, run.id, b"{}", start_inv(run, "resume"), now_ms())
    resumed = await claim(repo, "ev-dead", token=uid("tok"))
    assert resumed is not None
    assert await repo.events.emit(inv, hashed, [("message", b"1")], now_ms(), CAP) is None  # the first token, dead
    assert statuses(await log_of(repo, run.id)) == ["queued", "running", "held", "queued", "running"]
    assert len(await log_of(repo, run.id)) == 5


async def test_an_emit_past_the_cap_writes_nothing_and_the_platform_still_writes(repo: PlatformFacet) -> None:
    run, claimed = await running(repo, "ev-cap")  # queued, running: 2 events
    assert await emit(repo, claimed, 1, 2, cap=5) == 4
    with pytest.raises(TooLarge):
        await emit(repo, claimed, 3, 4, cap=5)
    assert await emit(repo, claimed, 3, cap=5) == 5
    with pytest.raises(TooLarge):
        await emit(repo, claimed, 4, cap=5)
    await repo.finish(claimed.invocation.id, claimed.invocation.token_hash or "", Outcome("complete", b"0"), now_ms())
    assert [seq for seq, _, _ in await log_of(repo, run.id)] == [1, 2, 3, 4, 5, 6, 7]
    assert [data for _, kind, data in await log_of(repo, run.id) if kind == "message"] == [1, 2, 3]


async def test_concurrent_emits_into_one_run_each_get_their_own_seqs(repo: PlatformFacet) -> None:
    run, claimed = await running(repo, "ev-many")
    batches = [[("message", orjson.dumps([writer, n])) for n in range(5)] for writer in range(16)]
    hashed = claimed.invocation.token_hash or ""
    answers = await asyncio.gather(
        *(repo.events.emit(claimed.invocation.id, hashed, batch, now_ms(), CAP) for batch in batches)
    )
    assert sorted(answer.seq for answer in answers if answer is not None) == [2 + 5 * n for n in range(1, 17)]
    log = await repo.events.read(run.id, 0, 1000)
    assert [event.seq for event in log] == list(range(1, 83))
    written = {event.seq: tuple(orjson.loads(event.data)) for event in log if event.type == "message"}
    assert sorted(written.values()) == sorted((writer, n) for writer in range(16) for n in range(5))
    for answer in answers:  # each emit's events are together, in its own order, ending at its seq
        assert answer is not None
        mine = [written[seq] for seq in range(answer.seq - 4, answer.seq + 1)]
        assert len({writer for writer, _ in mine}) == 1 and [n for _, n in mine] == list(range(5))


async def test_emits_racing_the_finish_never_land_after_the_final_event(repo: PlatformFacet) -> None:
    for attempt in range(3):
        run, claimed = await running(repo, f"ev-race-{attempt}")
        inv, hashed = claimed.invocation.id, claimed.invocation.token_hash or ""
        emits = [repo.events.emit(inv, hashed, [("message", orjson.dumps(n))], now_ms(), CAP) for n in range(12)]
        finish = repo.finish(inv, hashed, Outcome("complete", b"1"), now_ms())
        await asyncio.gather(*emits[:6], finish, *emits[6:])
        log = await repo.events.read(run.id, 0, 1000)
        assert [event.seq for event in log] == list(range(1, len(log) + 1))
        assert log[-1].ends and log[-2].type == "run.output"


# ---------------------------------------------------------------- following


async def test_follow_wakes_for_the_runs_that_got_events(repo: PlatformFacet) -> None:
    async with following(repo.events) as sink:
        run, claimed = await running(repo, "ev-follow")
        repo.events.written()
        await sink.woken_for(run.id)
        sink.woken.clear()
        await emit(repo, claimed, "hello")
        repo.events.written()
        await sink.woken_for(run.id)


async def test_a_read_sees_whole_emits_in_seq_order_while_they_are_written(repo: PlatformFacet) -> None:
    run, claimed = await running(repo, "ev-prefix")
    reads: list[list[StoredEvent]] = []

    async def reader() -> None:
        for _ in range(30):
            reads.append(await repo.events.read(run.id, 0, 1000))
            await asyncio.sleep(0)

    writes = [emit(repo, claimed, *range(n, n + 3)) for n in range(0, 30, 3)]
    await asyncio.gather(reader(), *writes)
    for seen in reads:
        assert [event.seq for event in seen] == list(range(1, len(seen) + 1))  # a prefix, never a gap
        assert (len(seen) - 2) % 3 == 0  # whole emits only
