"""The platform facet's lifecycle calls, on every store that declares a platform: queue deadlines and
their expiry, session metadata, the agents workers claim for, and the purge of finished runs.

As in ``test_platform_repo.py`` (whose helpers these tests share; the fixtures are ``conftest.py``'s),
the facet is driven directly, so what is proven is each call's atomic guard; the concurrency tests fire many calls at
once with ``asyncio.gather`` (on PostgreSQL each on its own pooled connection). Deadlines are set in
the past or far ahead rather than waited for, so no test sleeps.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from test_platform_repo import ENV, claim, new_run, session, uid

from backends import declaring
from claimers import claimer
from keepstate.clock import now_ms
from keepstate.errors import SessionBusy
from keepstate.stores.base import Database, PlatformFacet
from keepstate.stores.records import FINAL, Claimed, Outcome, StoredInvocation, StoredRun

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
PAST, FUTURE = -60_000, 3_600_000
"""Deadlines relative to now: passed a minute ago, or an hour ahead."""


def due_run(agent: str = "chat", session_id: str | None = None, deadline_in: int = PAST) -> StoredRun:
    """A queued run whose deadline is ``deadline_in`` ms from now."""
    run = new_run(agent, session_id)
    return replace(run, queue_timeout=5_000, queue_deadline=now_ms() + deadline_in)


async def queue(repo: PlatformFacet, run: StoredRun) -> StoredRun:
    """Start ``run`` with its start invocation carrying the run's deadline."""
    invocation = StoredInvocation(
        uid("inv"), ENV, run.id, run.agent, "start", "queued", now_ms(), queue_deadline=run.queue_deadline
    )
    started, created = await repo.start_run(run, "k1", invocation)
    assert created
    return started


async def status(repo: PlatformFacet, run_id: str) -> str:
    found = await repo.get_run(ENV, run_id)
    assert found is not None
    return found.status


# ---------------------------------------------------------------- deadlines


async def test_a_run_past_its_deadline_is_never_claimed_even_before_any_sweep(repo: PlatformFacet) -> None:
    late = await queue(repo, due_run("slow"))
    assert late.queue_deadline is not None and late.queue_timeout == 5_000
    assert not await repo.has_queued(ENV, ["slow"], now_ms())
    assert await claim(repo, "slow") is None
    fresh = await queue(repo, due_run("slow", deadline_in=FUTURE))
    assert await repo.has_queued(ENV, ["slow"], now_ms())
    claimed = await claim(repo, "slow")
    assert claimed is not None and claimed.run.id == fresh.id and claimed.run.queue_deadline is None
    assert await status(repo, late.id) == "queued"  # shown as queued only until a sweep or a reader expires it


async def test_the_sweep_expires_exactly_the_overdue_queued_runs_once(repo: PlatformFacet) -> None:
    overdue = [await queue(repo, due_run("slow")) for _ in range(3)]
    waiting = await queue(repo, due_run("slow", deadline_in=FUTURE))
    timeless = await queue(repo, new_run("slow"))  # queued without a deadline (an old import): never expires
    before = now_ms()
    assert await repo.expire_queued(now_ms()) == 3
    assert await repo.expire_queued(now_ms()) == 0
    for run in overdue:
        found = await repo.get_run(ENV, run.id)
        assert found is not None and found.status == "expired" and found.updated_at >= before
    assert [await status(repo, r.id) for r in (waiting, timeless)] == ["queued", "queued"]
    claimed = [await claim(repo, "slow"), await claim(repo, "slow"), await claim(repo, "slow")]
    assert sorted(c.run.id for c in claimed if c is not None) == sorted([waiting.id, timeless.id])


async def test_servers_sweeping_at_once_expire_each_run_exactly_once(repo: PlatformFacet) -> None:
    runs = [await queue(repo, due_run(f"a{n % 3}")) for n in range(30)]
    counts = await asyncio.gather(*(repo.expire_queued(now_ms()) for _ in range(8)))
    assert sum(counts) == 30
    assert {await status(repo, run.id) for run in runs} == {"expired"}


async def test_claims_racing_the_sweep_take_or_expire_each_run_never_both(repo: PlatformFacet) -> None:
    runs = [await queue(repo, due_run("race", deadline_in=200)) for _ in range(20)]
    deadline = max(run.queue_deadline or 0 for run in runs)
    # every deadline passes while they race, strictly before the sweep's clock however fast the machine
    await asyncio.sleep(max(0, deadline - now_ms()) / 1000 + 0.01)
    worker = await claimer(repo, ENV)
    now = now_ms() - 250  # claims judging by a clock a little behind: they may still take some
    results = await asyncio.gather(
        *(
            [repo.claim(ENV, ["race"], uid("tok"), now + 30_000, now, worker) for _ in range(20)]
            + [repo.expire_queued(now_ms()) for _ in range(4)]
        )
    )
    claimed = {r.run.id for r in results if isinstance(r, Claimed)}
    expired = sum(int(n) for n in results[20:] if isinstance(n, int))
    assert len(claimed) + expired == 20
    for run in runs:
        assert await status(repo, run.id) == ("running" if run.id in claimed else "expired")


async def test_a_run_past_its_deadline_does_not_block_its_session_and_expires_then(repo: PlatformFacet) -> None:
    sid = await session(repo)
    stuck = await queue(repo, due_run("nobody", sid))
    turn = await queue(repo, due_run("chat", sid, deadline_in=FUTURE))
    assert turn.status == "queued" and await status(repo, stuck.id) == "expired"
    with pytest.raises(SessionBusy):
        await queue(repo, due_run("chat", sid, deadline_in=FUTURE))  # a live queued turn still blocks
    assert await claim(repo, "nobody") is None  # its invocation went with it


async def test_many_turns_after_an_expired_one_exactly_one_starts(repo: PlatformFacet) -> None:
    sid = await session(repo)
    stuck = await queue(repo, due_run("nobody", sid))
    results = await asyncio.gather(
        *(queue(repo, due_run("chat", sid, deadline_in=FUTURE)) for _ in range(10)), return_exceptions=True
    )
    assert sum(isinstance(r, StoredRun) for r in results) == 1
    assert all(isinstance(r, StoredRun | SessionBusy) for r in results)
    assert await status(repo, stuck.id) == "expired"


async def test_cancel_and_decide_of_an_expired_run_change_nothing(repo: PlatformFacet) -> None:
    overdue = await queue(repo, due_run())
    cancelled = await repo.cancel(ENV, overdue.id, now_ms())  # past its deadline: it expired, whatever the sweep
    assert cancelled is not None and cancelled.status == "expired"
    resume = StoredInvocation(uid("inv"), ENV, overdue.id, "chat", "resume", "queued", now_ms(), queue_deadline=0)
    assert await repo.decide(ENV, overdue.id, b"{}", resume, now_ms()) is None
    again = await repo.cancel(ENV, overdue.id, now_ms())
    assert again is not None and (again.status, again.updated_at) == ("expired", cancelled.updated_at)


async def test_a_resume_gets_a_fresh_deadline_and_expires_by_it(repo: PlatformFacet) -> None:
    run = await queue(repo, due_run("hold", deadline_in=FUTURE))
    claimed = await claim(repo, "hold", token="tok-hold")
    assert claimed is not None
    await repo.finish(claimed.invocation.id, "tok-hold", Outcome("hold", b'{"ask":1}'), now_ms())
    fresh = now_ms() + FUTURE
    resume = StoredInvocation(uid("inv"), ENV, run.id, "hold", "resume", "queued", now_ms(), queue_deadline=fresh)
    decided = await repo.decide(ENV, run.id, b'{"approved":true}', resume, now_ms())
    assert decided is not None and (decided.status, decided.queue_deadline) == ("queued", fresh)
    assert await repo.expire_queued(now_ms()) == 0
    assert await repo.expire_queued(fresh + 1) == 1  # the resume's own deadline, not the start's
    assert await status(repo, run.id) == "expired"


async def test_a_session_whose_only_queued_run_is_overdue_can_be_deleted(
    repo: PlatformFacet, database: Database
) -> None:
    sid = await session(repo)
    stuck = await queue(repo, due_run("nobody", sid))
    assert await database.delete_session(ENV, sid, now_ms()) == ["nobody"]
    assert await status(repo, stuck.id) == "expired"


# ---------------------------------------------------------------- sessions


async def test_update_session_replaces_metadata_of_its_owner_only(repo: PlatformFacet) -> None:
    sid = await session(repo, owner="k1")
    updated = await repo.update_session(ENV, sid, "k1", b'{"title":"new"}')
    assert updated is not None and (updated.id, updated.owner, updated.metadata) == (sid, "k1", b'{"title":"new"}')
    assert await repo.update_session(ENV, sid, "k2", b'{"x":1}') is None
    assert await repo.update_session("other", sid, None, b'{"x":1}') is None
    assert await repo.update_session(ENV, "absent", None, b'{"x":1}') is None
    by_admin = await repo.update_session(ENV, sid, None, b'{"by":"admin"}')
    assert by_admin is not None and by_admin.metadata == b'{"by":"admin"}'
    found = await repo.get_session(ENV, sid)
    assert found is not None and found.metadata == b'{"by":"admin"}' and found.created_at == updated.created_at


# ---------------------------------------------------------------- agents


async def test_agent_stats_count_runs_by_status_and_remember_the_last_claim(repo: PlatformFacet) -> None:
    await repo.touch_agents(ENV, ["idle"], 5_000)
    await repo.touch_agents(ENV, ["idle"], 4_000)  # an older time never wins
    queued = await queue(repo, due_run("busy", deadline_in=FUTURE))
    await queue(repo, due_run("busy", deadline_in=FUTURE))
    claimed = await claim(repo, "busy", token="tok-busy")
    assert claimed is not None
    await repo.finish(claimed.invocation.id, "tok-busy", Outcome("complete", b"1"), now_ms())
    await queue(repo, due_run("gone"))
    await repo.expire_queued(now_ms())
    other_env = replace(due_run("elsewhere", deadline_in=FUTURE), env="other")
    await repo.start_run(
        other_env,
        "k9",
        StoredInvocation(
            uid("inv"),
            "other",
            other_env.id,
            "elsewhere",
            "start",
            "queued",
            now_ms(),
            queue_deadline=other_env.queue_deadline,
        ),
    )
    stats = {agent.agent: agent for agent in await repo.agent_stats(ENV)}
    assert set(stats) == {"idle", "busy", "gone"}
    assert (stats["idle"].last_claim_at, stats["idle"].runs, stats["idle"].oldest_queued_at) == (5_000, {}, None)
    busy = stats["busy"]
    assert busy.runs == {"done": 1, "queued": 1} and busy.last_claim_at is None
    assert busy.oldest_queued_at is not None and busy.oldest_queued_at >= queued.created_at
    assert busy.public() == {"name": "busy", "last_claim_at": None, "queued": 1, "running": 0, "held": 0}
    assert stats["gone"].runs == {"expired": 1}
    everywhere = {(agent.env, agent.agent) for agent in await repo.agent_stats(None)}
    assert everywhere == {(ENV, "idle"), (ENV, "busy"), (ENV, "gone"), ("other", "elsewhere")}


async def test_concurrent_touches_keep_the_latest_claim(repo: PlatformFacet) -> None:
    times = list(range(1_000, 1_020))
    await asyncio.gather(*(repo.touch_agents(ENV, ["a", "b"], at) for at in reversed(times)))
    stats = await repo.agent_stats(ENV)
    assert [(agent.agent, agent.last_claim_at) for agent in stats] == [("a", 1_019), ("b", 1_019)]


# ---------------------------------------------------------------- purge


async def _finished(repo: PlatformFacet, kind: str, agent: str = "job", at: int | None = None) -> StoredRun:
    """A run ended by ``kind`` (at ``at``, ms, else now): complete (done), fail (failed), hold (held, which
    is not finished)."""
    await queue(repo, due_run(agent, deadline_in=FUTURE))
    token = uid("tok")
    claimed = await claim(repo, agent, token=token)
    assert claimed is not None
    ended = await repo.finish(claimed.invocation.id, token, Outcome(kind, b'"x"'), now_ms() if at is None else at)
    assert ended is not None
    return ended


async def every_status(repo: PlatformFacet) -> dict[str, StoredRun]:
    """One run in each status, each of its own agent (so claims pick the one meant)."""
    runs = {
        "done": await _finished(repo, "complete", "a-done"),
        "failed": await _finished(repo, "fail", "a-fail"),
        "held": await _finished(repo, "hold", "a-held"),
    }
    cancelled = await queue(repo, due_run("a-cancel", deadline_in=FUTURE))
    runs["cancelled"] = await repo.cancel(ENV, cancelled.id, now_ms()) or cancelled
    expired = await queue(repo, due_run("a-expire"))
    await repo.expire_queued(now_ms())
    runs["expired"] = await repo.get_run(ENV, expired.id) or expired
    await queue(repo, due_run("a-lost", deadline_in=FUTURE))
    lost = await claim(repo, "a-lost", lease_ms=-1)
    assert lost is not None and await repo.expire(now_ms()) == 1
    runs["interrupted"] = await repo.get_run(ENV, lost.run.id) or lost.run
    await queue(repo, due_run("a-run", deadline_in=FUTURE))
    running = await claim(repo, "a-run")
    assert running is not None
    runs["running"] = running.run
    runs["queued"] = await queue(repo, due_run("a-queue", deadline_in=FUTURE))
    for name, run in runs.items():
        assert await status(repo, run.id) == name
    return runs


async def test_purge_deletes_only_finished_runs_older_than_the_cutoff(repo: PlatformFacet) -> None:
    runs = await every_status(repo)
    cutoff = now_ms() + 1
    await asyncio.sleep(0.01)
    young = await _finished(repo, "complete", "a-young")
    assert await repo.count_purgeable(cutoff) == len(FINAL)
    assert await repo.purge_runs(cutoff, 1000) == len(FINAL)
    assert await repo.purge_runs(cutoff, 1000) == 0
    for name, run in runs.items():
        assert (await repo.get_run(ENV, run.id) is None) == (name in FINAL), name
    assert await repo.get_run(ENV, young.id) is not None  # finished after the cutoff
    assert await repo.count_purgeable(cutoff) == 0


async def test_purge_goes_in_batches_and_purgers_at_once_delete_each_run_once(repo: PlatformFacet) -> None:
    for _ in range(25):
        await _finished(repo, "complete")
    cutoff = now_ms() + 1
    assert await repo.purge_runs(cutoff, 10) == 10
    assert await repo.count_purgeable(cutoff) == 15
    gone = await asyncio.gather(*(repo.purge_runs(cutoff, 4) for _ in range(8)))
    assert sum(gone) == 15 and all(n <= 4 for n in gone)
    assert await repo.count_purgeable(cutoff) == 0


async def test_a_purge_batch_takes_the_oldest_finished_runs_first(repo: PlatformFacet) -> None:
    """Stopped midway, a purge has deleted the runs past their retention longest; ended in another
    order than their age, so neither the table's nor the index's order alone passes."""
    now = now_ms()
    runs = {age: await _finished(repo, "complete", at=now - age * 60_000) for age in (3, 0, 5, 1, 4, 2)}
    assert await repo.purge_runs(now + 1, 2) == 2
    kept = {age for age, run in runs.items() if await repo.get_run(ENV, run.id) is not None}
    assert kept == {0, 1, 2, 3}
