"""Double-texting: what starting a run does while its session has one queued or running (``multitask``), on
every store that declares a platform.

As in ``test_platform_repo.py`` (whose helpers these share), the facet is driven directly: what is proven
is the atomic guard of ``start_run`` (reject, enqueue, interrupt) and the turn guard of ``claim``. The races
are made by construction: many calls at once with ``asyncio.gather`` (on PostgreSQL each on its own pooled
connection), and every claim the test makes is checked against what must hold whatever the interleaving.
Deadlines are set in the past or far ahead, never waited for.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from test_platform_repo import ENV, claim, new_run, session, start_inv, uid

from backends import declaring
from claimers import claimer
from keepstate.clock import now_ms
from keepstate.errors import InvalidRequest, SessionBusy
from keepstate.platform import Platform
from keepstate.platform.models import Caller
from keepstate.stores.base import PlatformFacet
from keepstate.stores.records import Claimed, Outcome, RunFilter, StoredRun

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
HOUR_MS = 3_600_000


async def begin(repo: PlatformFacet, sid: str | None, multitask: str, agent: str = "chat", **run: object) -> StoredRun:
    """Start a run of ``agent`` in session ``sid`` with ``multitask``; its start invocation has the run's deadline."""
    fresh = replace(new_run(agent, sid), **run)  # type: ignore[arg-type]
    invocation = replace(start_inv(fresh), queue_deadline=fresh.queue_deadline)
    started, created = await repo.start_run(fresh, "k1", invocation, multitask)
    assert created and started.status == "queued"
    return started


async def status(repo: PlatformFacet, run_id: str) -> tuple[str, bool]:
    found = await repo.get_run(ENV, run_id)
    assert found is not None
    return found.status, found.cancel_requested


async def finish(repo: PlatformFacet, claimed: Claimed, kind: str = "complete") -> StoredRun:
    token = claimed.invocation.token_hash
    assert token is not None
    ended = await repo.finish(claimed.invocation.id, token, Outcome(kind, b"null"), now_ms())
    assert ended is not None
    return ended


async def claim_all_at_once(repo: PlatformFacet, agent: str, count: int) -> list[Claimed]:
    """``count`` claims fired together; the ones that got something."""
    now, worker = now_ms(), await claimer(repo, ENV)
    results = await asyncio.gather(
        *(repo.claim(ENV, [agent], uid("tok"), now + 30_000, now, worker) for _ in range(count))
    )
    return [c for c in results if c is not None]


# ---------------------------------------------------------------- reject, enqueue


async def test_reject_is_the_default_and_refuses_a_busy_session_as_before(repo: PlatformFacet) -> None:
    sid = await session(repo)
    first = await begin(repo, sid, "reject")
    for refused in (
        repo.start_run(new_run("chat", sid), "k1", start_inv(new_run())),
        repo.start_run(run := new_run("chat", sid), "k1", start_inv(run), "reject"),
    ):
        with pytest.raises(SessionBusy):
            await refused
    assert [r.id for r in await repo.list_runs(RunFilter(ENV, None, sid, None, 0, 10))] == [first.id]


async def test_enqueued_runs_start_one_at_a_time_in_the_order_they_were_started(repo: PlatformFacet) -> None:
    sid = await session(repo)
    runs = [await begin(repo, sid, "reject")] + [await begin(repo, sid, "enqueue") for _ in range(3)]
    for turn, run in enumerate(runs):
        claimed = await claim(repo)
        assert claimed is not None and claimed.run.id == run.id, f"turn {turn}"
        assert await claim(repo) is None  # the next one waits while this one runs
        assert not await repo.has_queued(ENV, ["chat"], now_ms())
        await finish(repo, claimed, ("complete", "fail", "hold", "complete")[turn])
    assert [await status(repo, r.id) for r in runs] == [
        ("done", False),
        ("failed", False),
        ("held", False),
        ("done", False),
    ]


async def test_a_run_without_a_session_or_in_another_session_never_waits(repo: PlatformFacet) -> None:
    busy, other = await session(repo), await session(repo)
    await begin(repo, busy, "reject")
    waiting = await begin(repo, busy, "enqueue")
    loose = await begin(repo, None, "enqueue")
    elsewhere = await begin(repo, other, "enqueue")
    taken = [await claim(repo) for _ in range(4)]
    ids = [c.run.id for c in taken if c is not None]
    assert waiting.id not in ids and {loose.id, elsewhere.id} <= set(ids) and len(ids) == 3


async def test_concurrent_claims_take_one_run_per_session_the_first_of_each(repo: PlatformFacet) -> None:
    sessions = [await session(repo) for _ in range(4)]
    queued = {sid: [await begin(repo, sid, "enqueue", "fan") for _ in range(3)] for sid in sessions}
    for round_ in range(3):
        claimed = await claim_all_at_once(repo, "fan", 12)
        assert sorted(c.run.id for c in claimed) == sorted(runs[round_].id for runs in queued.values())
        await asyncio.gather(*(finish(repo, c) for c in claimed))
    assert await claim_all_at_once(repo, "fan", 4) == []


async def test_turns_started_at_once_with_enqueue_all_run_one_at_a_time_in_seq_order(repo: PlatformFacet) -> None:
    sid = await session(repo)
    started = await asyncio.gather(*(begin(repo, sid, "enqueue", "burst") for _ in range(10)))
    order = [r.id for r in sorted(started, key=lambda r: r.seq)]
    ran: list[str] = []
    while len(ran) < len(order):
        claimed = await claim_all_at_once(repo, "burst", 4)
        assert len(claimed) == 1, "two runs of one session claimed at once"
        ran.append(claimed[0].run.id)
        await finish(repo, claimed[0])
    assert ran == order


async def claim_at(repo: PlatformFacet, now: int, agent: str = "chat") -> Claimed | None:
    """A claim judging deadlines by ``now`` (a clock moved ahead instead of a wait)."""
    return await repo.claim(ENV, [agent], uid("tok"), now + 30_000, now, await claimer(repo, ENV))


async def test_a_waiting_run_keeps_its_deadline_and_frees_its_place_once_expired(repo: PlatformFacet) -> None:
    sid = await session(repo)
    now = now_ms()
    ahead = await begin(repo, sid, "reject", queue_deadline=now + HOUR_MS)
    doomed = await begin(repo, sid, "enqueue", queue_deadline=now + HOUR_MS)
    last = await begin(repo, sid, "enqueue", queue_deadline=now + 3 * HOUR_MS)
    running = await claim(repo)
    assert running is not None and running.run.id == ahead.id
    await finish(repo, running)
    later = now + 2 * HOUR_MS  # past the waiting run's deadline, not the last one's
    assert await claim_at(repo, later) is None  # overdue: never claimed, but it keeps its place till it expires
    assert await repo.expire_queued(later) == 1
    assert await status(repo, doomed.id) == ("expired", False)
    claimed = await claim_at(repo, later)
    assert claimed is not None and claimed.run.id == last.id


# ---------------------------------------------------------------- interrupt


async def test_interrupt_cancels_the_queued_runs_and_requests_the_running_ones_cancel(repo: PlatformFacet) -> None:
    sid = await session(repo)
    first = await begin(repo, sid, "reject")
    running = await claim(repo)
    assert running is not None and running.run.id == first.id
    waiting = [await begin(repo, sid, "enqueue") for _ in range(2)]
    newest = await begin(repo, sid, "interrupt")
    assert [await status(repo, r.id) for r in waiting] == [("cancelled", False)] * 2
    assert await status(repo, first.id) == ("running", True)
    token = running.invocation.token_hash or ""
    assert await repo.heartbeat(running.invocation.id, token, now_ms(), now_ms() + 30_000) is True
    assert await claim(repo) is None  # neither a cancelled run nor the new one while the old one runs
    ended = await finish(repo, running, "fail")
    assert ended.status == "cancelled"
    claimed = await claim(repo)
    assert claimed is not None and claimed.run.id == newest.id and not claimed.run.cancel_requested
    assert await claim(repo) is None


async def test_interrupt_in_an_idle_session_or_without_one_just_queues(repo: PlatformFacet) -> None:
    sid = await session(repo)
    done = await begin(repo, sid, "reject")
    claimed = await claim(repo)
    assert claimed is not None
    await finish(repo, claimed)
    fresh = await begin(repo, sid, "interrupt")
    loose = await begin(repo, None, "interrupt")
    assert await status(repo, done.id) == ("done", False)
    taken = {c.run.id for c in [await claim(repo), await claim(repo)] if c is not None}
    assert taken == {fresh.id, loose.id}


async def held_turn(repo: PlatformFacet) -> tuple[str, StoredRun]:
    """A new session and its first run, held."""
    sid = await session(repo)
    held = await begin(repo, sid, "reject")
    claimed = await claim(repo)
    assert claimed is not None and claimed.run.id == held.id
    await finish(repo, claimed, "hold")
    return sid, held


async def test_a_held_run_is_neither_waited_for_nor_interrupted(repo: PlatformFacet) -> None:
    sid, held = await held_turn(repo)
    queued = await begin(repo, sid, "enqueue")
    assert await status(repo, held.id) == ("held", False)
    interrupting = await begin(repo, sid, "interrupt")
    assert await status(repo, held.id) == ("held", False)
    assert await status(repo, queued.id) == ("cancelled", False)
    taken = await claim(repo)  # the held run is not waited for
    assert taken is not None and taken.run.id == interrupting.id


async def test_a_resume_runs_beside_a_newer_turn_and_a_turn_after_it_waits(repo: PlatformFacet) -> None:
    """A resume is never held back, and a turn started before the decision may run beside it, as without
    ``multitask``; a turn enqueued after the decision waits for the resume (and for the other turn)."""
    sid, held = await held_turn(repo)
    newer = await begin(repo, sid, "enqueue")
    resumed = await repo.decide(ENV, held.id, b'{"approved":true}', start_inv(held, "resume"), now_ms())
    assert resumed is not None
    later = await begin(repo, sid, "enqueue")
    both = await claim_all_at_once(repo, "chat", 4)
    assert sorted((c.run.id, c.invocation.kind) for c in both) == sorted([(newer.id, "start"), (held.id, "resume")])
    resume = next(c for c in both if c.invocation.kind == "resume")
    turn = next(c for c in both if c.invocation.kind == "start")
    await finish(repo, turn)
    assert await claim(repo) is None  # the resume, queued before it, still runs
    await finish(repo, resume)
    last = await claim(repo)
    assert last is not None and last.run.id == later.id


async def test_interrupt_racing_claims_never_leaves_two_runs_of_the_session_running(repo: PlatformFacet) -> None:
    sid = await session(repo)
    for _ in range(3):
        await begin(repo, sid, "enqueue", "race")
    now, worker = now_ms(), await claimer(repo, ENV)
    results = await asyncio.gather(
        *(repo.claim(ENV, ["race"], uid("tok"), now + 30_000, now, worker) for _ in range(6)),
        begin(repo, sid, "interrupt", "race"),
    )
    claimed = [c for c in results[:-1] if isinstance(c, Claimed)]
    newest = results[-1]
    assert isinstance(newest, StoredRun)
    assert len(claimed) <= 1
    runs = await repo.list_runs(RunFilter(ENV, None, sid, None, 0, 10))
    states = {r.id: (r.status, r.cancel_requested) for r in runs}
    assert states.pop(newest.id) == ("queued", False)
    # the run a claim took before the interrupt runs with its cancel requested; every other one is cancelled
    assert sorted(states.values()) == sorted(
        [("running", True)] * len(claimed) + [("cancelled", False)] * (3 - len(claimed))
    )
    if claimed:
        assert await claim(repo, "race") is None
        await finish(repo, claimed[0], "fail")
    taken = await claim(repo, "race")
    assert taken is not None and taken.run.id == newest.id


async def test_a_repeated_idempotency_key_returns_the_first_run_and_interrupts_nothing(repo: PlatformFacet) -> None:
    sid = await session(repo)
    await begin(repo, sid, "reject")
    running = await claim(repo)
    assert running is not None
    first = await begin(repo, sid, "enqueue", idempotency_key="turn-2")
    again = replace(new_run("chat", sid), idempotency_key="turn-2")
    found, created = await repo.start_run(again, "k1", start_inv(again), "interrupt")
    assert (found.id, created) == (first.id, False)
    assert await status(repo, running.run.id) == ("running", False)
    assert await status(repo, first.id) == ("queued", False)


# ---------------------------------------------------------------- the rules over the facet


async def test_a_bad_multitask_is_an_invalid_request_and_starts_nothing(platform: Platform) -> None:
    caller = Caller(ENV, "admin", "k-admin")
    sid, _ = await platform.create_session(caller, {})
    for bad in ("sometimes", "", "ENQUEUE", 1, True, ["enqueue"], {"mode": "enqueue"}):
        with pytest.raises(InvalidRequest, match="multitask"):
            await platform.start_run(caller, {"agent": "chat", "session_id": sid.id, "multitask": bad})
    assert (await platform.list_runs(caller, {"limit": 10})).items == []
    run, created = await platform.start_run(caller, {"agent": "chat", "session_id": sid.id, "multitask": None})
    assert created
    with pytest.raises(SessionBusy):
        await platform.start_run(caller, {"agent": "chat", "session_id": sid.id})
    queued, _ = await platform.start_run(caller, {"agent": "chat", "session_id": sid.id, "multitask": "enqueue"})
    assert queued.status == "queued" and queued.id != run.id
