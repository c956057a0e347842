"""The platform facet's contract, run on every store that declares one.

Each test opens a fresh store with ``open_platform(url)`` and drives its facet (``.repo``) directly,
so what is proven is the facet's atomicity, not the service's checks. The concurrency tests
fire many operations at once with ``asyncio.gather`` (on PostgreSQL each on its own pooled
connection, so the database really interleaves them). No test branches on the backend.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from backends import declaring
from claimers import claimer
from keepstate.clock import now_ms
from keepstate.errors import NotFound, SessionBusy
from keepstate.platform import open_platform
from keepstate.stores.base import Database, PlatformFacet
from keepstate.stores.records import (
    NULL,
    Claimed,
    Outcome,
    RunFilter,
    StoredInvocation,
    StoredKey,
    StoredRun,
    StoredSession,
)

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
ENV = "default"
_ids = itertools.count(1)


def uid(prefix: str) -> str:
    return f"{prefix}_{next(_ids)}_{now_ms()}"


def new_run(
    agent: str = "chat", session_id: str | None = None, idem: str | None = None, owner: str = "k1"
) -> StoredRun:
    now = now_ms()
    return StoredRun(
        ENV, uid("run"), agent, owner, session_id, None, None, "queued", b'{"in":1}', now, now, idempotency_key=idem
    )


def start_inv(run: StoredRun, kind: str = "start") -> StoredInvocation:
    return StoredInvocation(uid("inv"), ENV, run.id, run.agent, kind, "queued", now_ms())


async def start(repo: PlatformFacet, run: StoredRun, caller: str = "k1") -> tuple[StoredRun, bool]:
    return await repo.start_run(run, caller, start_inv(run))


async def session(repo: PlatformFacet, session_id: str | None = None, owner: str = "k1") -> str:
    sid = session_id or uid("ses")
    await repo.create_session(StoredSession(ENV, sid, owner, "u1", b"{}", now_ms()))
    return sid


async def claim(
    repo: PlatformFacet, agent: str = "chat", token: str | None = None, lease_ms: int = 30_000
) -> Claimed | None:
    now = now_ms()
    return await repo.claim(ENV, [agent], token or uid("tok"), now + lease_ms, now, await claimer(repo, ENV))


# ---------------------------------------------------------------- keys


async def test_keys_add_find_list_revoke(repo: PlatformFacet) -> None:
    assert not await repo.has_keys()
    key = StoredKey(uid("key"), ENV, "member", "m", now_ms())
    await repo.add_key(key, "hash-1")
    assert await repo.has_keys()
    found = await repo.key_by_hash("hash-1")
    assert found is not None and (found.id, found.env, found.role, found.revoked) == (key.id, ENV, "member", False)
    assert [k.id for k in await repo.list_keys(ENV)] == [key.id]
    assert await repo.list_keys("other") == []
    assert await repo.revoke_key("other", key.id, now_ms()) is None  # another environment's key is not found
    assert await repo.revoke_key(ENV, key.id, now_ms()) == []
    assert await repo.revoke_key(ENV, key.id, now_ms()) is None
    revoked = await repo.key_by_hash("hash-1")
    assert revoked is not None and revoked.revoked
    assert await repo.list_keys(ENV) == []
    assert not await repo.has_keys()


async def _worker_key(repo: PlatformFacet) -> str:
    key = StoredKey(uid("key"), ENV, "worker", "w", now_ms())
    await repo.add_key(key, uid("hash"))
    return key.id


async def test_revoking_a_key_ends_its_claims_and_a_revoked_key_claims_nothing(repo: PlatformFacet) -> None:
    worker = await _worker_key(repo)
    held, _ = await start(repo, new_run("rv"))
    now = now_ms()
    claimed = await repo.claim(ENV, ["rv"], "tok-rv", now + 30_000, now, worker)
    assert claimed is not None and claimed.invocation.claimed_by == worker
    await start(repo, new_run("rv-other"))
    other = await claim(repo, "rv-other")  # another key's claim, untouched
    assert other is not None
    waiting, _ = await start(repo, new_run("rv"))
    assert await repo.revoke_key(ENV, worker, now_ms()) == [held.id]
    assert await repo.token_lease("tok-rv") is None and await repo.token_context("tok-rv") is None
    assert await repo.heartbeat(claimed.invocation.id, "tok-rv", now_ms(), now_ms() + 1000) is None
    ended = await repo.get_run(ENV, held.id)
    assert ended is not None and ended.status == "interrupted"
    assert await repo.claim(ENV, ["rv"], "tok-rv2", now_ms() + 30_000, now_ms(), worker) is None
    still = await repo.get_run(ENV, waiting.id)
    assert still is not None and still.status == "queued"
    assert await repo.token_lease(other.invocation.token_hash or "") is not None


async def test_claims_racing_a_revocation_are_each_ended_or_refused(repo: PlatformFacet) -> None:
    worker = await _worker_key(repo)
    for _ in range(12):
        await start(repo, new_run("race-rv"))
    now = now_ms()
    results = await asyncio.gather(
        *(repo.claim(ENV, ["race-rv"], f"tok-race-{n}", now + 30_000, now, worker) for n in range(12)),
        repo.revoke_key(ENV, worker, now),
    )
    claimed = [c for c in results[:-1] if isinstance(c, Claimed)]
    ended = results[-1]
    assert isinstance(ended, list) and sorted(ended) == sorted(c.run.id for c in claimed)
    for c in claimed:
        assert await repo.token_lease(c.invocation.token_hash or "") is None


async def test_an_end_user_goes_to_the_first_key_that_names_it_however_many_race(repo: PlatformFacet) -> None:
    user = uid("user")
    answers = await asyncio.gather(*(repo.bind_user(ENV, user, f"key_{n}") for n in range(8)))
    assert len(set(answers)) == 1 and answers[0] in {f"key_{n}" for n in range(8)}
    assert await repo.bind_user(ENV, user, "key_late") == answers[0]
    assert await repo.bind_user("other", user, "key_late") == "key_late"  # environments never meet


async def test_only_one_first_key_wins_when_servers_start_at_once(repo: PlatformFacet) -> None:
    keys = [StoredKey(uid("key"), "default", "admin", "bootstrap", now_ms()) for _ in range(8)]
    won = await asyncio.gather(*(repo.add_first_key(key, f"first-{n}") for n, key in enumerate(keys)))
    assert sorted(won) == [False] * 7 + [True]
    winner = won.index(True)
    assert [k.id for k in await repo.list_keys("default")] == [keys[winner].id]
    assert not await repo.add_first_key(StoredKey(uid("key"), "default", "admin", None, now_ms()), "late")
    assert await repo.key_by_hash("late") is None


async def test_ensure_admin_key_makes_a_known_secret_an_unrevoked_admin(repo: PlatformFacet) -> None:
    key = StoredKey(uid("key"), ENV, "member", "m", now_ms())
    await repo.add_key(key, "boot")
    await repo.revoke_key(ENV, key.id, now_ms())
    await repo.ensure_admin_key(StoredKey(uid("key"), ENV, "admin", "bootstrap", now_ms()), "boot")
    await repo.ensure_admin_key(StoredKey(uid("key"), ENV, "admin", "bootstrap", now_ms()), "boot")
    found = await repo.key_by_hash("boot")
    assert found is not None and (found.role, found.revoked) == ("admin", False)
    assert len(await repo.list_keys(ENV)) == 1


# ---------------------------------------------------------------- sessions


async def test_sessions_create_once_get_list_and_page(repo: PlatformFacet) -> None:
    first, created = await repo.create_session(StoredSession(ENV, "s1", "k1", "u1", b'{"a":1}', now_ms()))
    assert created and (first.owner, first.user, first.metadata) == ("k1", "u1", b'{"a":1}')
    again, created = await repo.create_session(StoredSession(ENV, "s1", "k2", None, b"{}", now_ms()))
    assert not created and (again.owner, again.metadata) == ("k1", b'{"a":1}')
    await repo.create_session(StoredSession(ENV, "s2", "k2", "u2", b"{}", now_ms()))
    await repo.create_session(StoredSession(ENV, "s3", "k1", "u2", b"{}", now_ms()))
    assert await repo.get_session(ENV, "s1") == first
    assert await repo.get_session("other", "s1") is None
    assert [s.id for s in await repo.list_sessions(ENV, None, None, 0, 10)] == ["s1", "s2", "s3"]
    assert [s.id for s in await repo.list_sessions(ENV, "k1", None, 0, 10)] == ["s1", "s3"]
    assert [s.id for s in await repo.list_sessions(ENV, None, "u2", 0, 10)] == ["s2", "s3"]
    page = await repo.list_sessions(ENV, None, None, 0, 2)
    assert [s.id for s in await repo.list_sessions(ENV, None, None, page[-1].seq, 2)] == ["s3"]


async def test_sessions_newest_first_paged_with_filters(repo: PlatformFacet) -> None:
    for n, (owner, user) in enumerate([("k1", "u1"), ("k2", "u2"), ("k1", "u2"), ("k1", None), ("k2", "u1")]):
        await repo.create_session(StoredSession(ENV, f"d{n}", owner, user, b"{}", now_ms()))
    await repo.create_session(StoredSession("other", "d9", "k1", "u1", b"{}", now_ms()))

    async def ids(owner: str | None, user: str | None, after: int = 0, limit: int = 10) -> list[str]:
        return [s.id for s in await repo.list_sessions(ENV, owner, user, after, limit, desc=True)]

    assert await ids(None, None) == ["d4", "d3", "d2", "d1", "d0"]
    assert await ids("k1", None) == ["d3", "d2", "d0"]
    assert await ids(None, "u2") == ["d2", "d1"]
    assert await ids("k1", "u2") == ["d2"]
    first = await repo.list_sessions(ENV, None, None, 0, 2, desc=True)
    assert [s.id for s in first] == ["d4", "d3"]
    second = await repo.list_sessions(ENV, None, None, first[-1].seq, 2, desc=True)
    assert [s.id for s in second] == ["d2", "d1"]
    assert await ids(None, None, second[-1].seq) == ["d0"]
    assert await ids("k2", None, second[-1].seq) == []


async def test_session_agents_are_the_agents_of_its_runs(repo: PlatformFacet) -> None:
    sid = await session(repo)
    assert await repo.session_agents(ENV, sid) == []
    for agent in ("writer", "critic", "writer"):
        run, _ = await start(repo, new_run(agent, sid))
        await repo.cancel(ENV, run.id, now_ms())
    await start(repo, new_run("elsewhere"))
    assert await repo.session_agents(ENV, sid) == ["critic", "writer"]
    assert await repo.session_agents("other", sid) == []


async def test_concurrent_creates_of_one_session_create_it_once(repo: PlatformFacet) -> None:
    results = await asyncio.gather(
        *(repo.create_session(StoredSession(ENV, "same", f"k{i}", None, b"{}", now_ms())) for i in range(12))
    )
    assert sum(created for _, created in results) == 1
    assert len({s.owner for s, _ in results}) == 1


async def test_delete_session_absent_busy_idle(repo: PlatformFacet, database: Database) -> None:
    assert await database.delete_session(ENV, "nope", now_ms()) is None
    sid = await session(repo)
    await start(repo, new_run("chat", sid))
    with pytest.raises(SessionBusy):
        await database.delete_session(ENV, sid, now_ms())
    claimed = await claim(repo, token="t-del")
    assert claimed is not None
    with pytest.raises(SessionBusy):
        await database.delete_session(ENV, sid, now_ms())
    await repo.finish(claimed.invocation.id, "t-del", Outcome("complete", b"1"), now_ms())
    assert await database.delete_session(ENV, sid, now_ms()) == ["chat"]
    assert await repo.get_session(ENV, sid) is None
    with pytest.raises(NotFound):
        await start(repo, new_run("chat", sid))


async def _held_run(repo: PlatformFacet, sid: str, token: str) -> StoredRun:
    run, _ = await start(repo, new_run("chat", sid))
    claimed = await claim(repo, token=token)
    assert claimed is not None and claimed.run.id == run.id
    await repo.finish(claimed.invocation.id, token, Outcome("hold", b"null"), now_ms())
    return run


async def test_deleting_a_session_cancels_its_held_runs(repo: PlatformFacet, database: Database) -> None:
    sid = await session(repo)
    held = await _held_run(repo, sid, "t-held-del")
    assert await database.delete_session(ENV, sid, now_ms()) == ["chat"]
    found = await repo.get_run(ENV, held.id)
    assert found is not None and found.status == "cancelled"
    assert await repo.decide(ENV, held.id, b"{}", start_inv(held, "resume"), now_ms()) is None
    await session(repo, sid, owner="k2")  # the id again, by someone else: nothing of the old one blocks it
    _, created = await start(repo, new_run("chat", sid, owner="k2"), caller="k2")
    assert created


async def test_a_decision_racing_a_session_delete_never_queues_a_resume_in_a_deleted_session(
    repo: PlatformFacet,
    database: Database,
) -> None:
    for round_ in range(10):
        sid = await session(repo)
        held = await _held_run(repo, sid, f"t-race-{round_}")
        decided, deleted = await asyncio.gather(
            repo.decide(ENV, held.id, b"{}", start_inv(held, "resume"), now_ms()),
            database.delete_session(ENV, sid, now_ms()),
            return_exceptions=True,
        )
        run = await repo.get_run(ENV, held.id)
        assert run is not None
        if isinstance(deleted, SessionBusy):  # the decision came first: the resume is queued, the session kept
            assert decided is not None and run.status == "queued"
            assert await repo.get_session(ENV, sid) is not None
        else:  # the delete came first: the run is cancelled and no resume was queued
            assert deleted == ["chat"] and decided is None and run.status == "cancelled"
            assert await claim(repo) is None
        resume = await claim(repo)
        if resume is not None:
            await repo.finish(
                resume.invocation.id, resume.invocation.token_hash or "", Outcome("complete", b"1"), now_ms()
            )


# ---------------------------------------------------------------- runs


async def test_start_run_one_turn_per_session(repo: PlatformFacet) -> None:
    sid = await session(repo)
    run, created = await start(repo, new_run("chat", sid))
    assert created and (run.status, run.session_id, run.input) == ("queued", sid, b'{"in":1}')
    with pytest.raises(SessionBusy):
        await start(repo, new_run("chat", sid))
    claimed = await claim(repo, token="t1")
    assert claimed is not None and claimed.run.id == run.id
    with pytest.raises(SessionBusy):  # running blocks too
        await start(repo, new_run("other", sid))
    await repo.finish(claimed.invocation.id, "t1", Outcome("complete", b"2"), now_ms())
    _, created = await start(repo, new_run("chat", sid))
    assert created
    with pytest.raises(NotFound):
        await start(repo, new_run("chat", "no-such-session"))


async def test_a_held_run_does_not_block_and_its_resume_is_never_refused(repo: PlatformFacet) -> None:
    sid = await session(repo)
    held, _ = await start(repo, new_run("chat", sid))
    claimed = await claim(repo, token="t-hold")
    assert claimed is not None
    ended = await repo.finish(claimed.invocation.id, "t-hold", Outcome("hold", b'{"q":1}'), now_ms())
    assert ended is not None and (ended.status, ended.hold) == ("held", b'{"q":1}')
    newer, created = await start(repo, new_run("chat", sid))  # the held turn does not block
    assert created
    resumed = await repo.decide(ENV, held.id, b'{"approved":true}', start_inv(held, "resume"), now_ms())
    assert resumed is not None and (resumed.status, resumed.decision) == ("queued", b'{"approved":true}')
    first, second = await claim(repo, token="ta"), await claim(repo, token="tb")
    assert first is not None and second is not None
    assert (first.run.id, first.invocation.kind) == (newer.id, "start")
    assert (second.run.id, second.invocation.kind, second.run.decision) == (held.id, "resume", b'{"approved":true}')


async def test_many_concurrent_turns_in_one_session_exactly_one_starts(repo: PlatformFacet) -> None:
    sid = await session(repo)

    async def one() -> bool:
        try:
            return (await start(repo, new_run("chat", sid)))[1]
        except SessionBusy:
            return False

    assert sum(await asyncio.gather(*(one() for _ in range(24)))) == 1
    runs = await repo.list_runs(RunFilter(ENV, None, sid, None, 0, 100))
    assert len(runs) == 1


async def test_idempotency_key_returns_the_first_run_per_caller(repo: PlatformFacet) -> None:
    first, created = await start(repo, new_run(idem="once"), caller="k1")
    again, created_again = await start(repo, new_run(idem="once"), caller="k1")
    assert created and not created_again and again.id == first.id
    other, created_other = await start(repo, new_run(idem="once"), caller="k2")
    assert created_other and other.id != first.id
    results = await asyncio.gather(*(start(repo, new_run(idem="race"), caller="k1") for _ in range(12)))
    assert sum(created for _, created in results) == 1
    assert len({run.id for run, _ in results}) == 1
    sid = await session(repo)  # an idempotent retry of a session turn is not session_busy
    turn, _ = await start(repo, new_run("chat", sid, idem="turn"))
    retry, created = await start(repo, new_run("chat", sid, idem="turn"))
    assert (retry.id, created) == (turn.id, False)


async def test_get_and_list_runs(repo: PlatformFacet) -> None:
    sid = await session(repo)
    a, _ = await start(repo, new_run("chat", sid, owner="k1"))
    b, _ = await start(repo, new_run("chat", owner="k2"))
    assert await repo.get_run(ENV, a.id) == a
    assert await repo.get_run("other", a.id) is None
    every = await repo.list_runs(RunFilter(ENV, None, None, None, 0, 10))
    assert [r.id for r in every] == [a.id, b.id]
    assert [r.id for r in await repo.list_runs(RunFilter(ENV, "k2", None, None, 0, 10))] == [b.id]
    assert [r.id for r in await repo.list_runs(RunFilter(ENV, None, sid, "queued", 0, 10))] == [a.id]
    assert await repo.list_runs(RunFilter(ENV, None, None, "done", 0, 10)) == []
    assert [r.id for r in await repo.list_runs(RunFilter(ENV, None, None, None, every[0].seq, 10))] == [b.id]


async def test_runs_newest_first_paged_by_agent_status_parent_session(repo: PlatformFacet) -> None:
    sid = await session(repo)
    parent, _ = await start(repo, new_run("lead", owner="k1"))
    child = replace(new_run("helper", owner="k1"), parent_id=parent.id)
    child, _ = await start(repo, child)
    turn, _ = await start(repo, new_run("lead", sid, owner="k1"))
    other, _ = await start(repo, new_run("helper", owner="k2"))
    await repo.cancel(ENV, turn.id, now_ms())
    await start(repo, replace(new_run("lead"), env="other"))

    async def ids(
        after: int = 0,
        owner: str | None = None,
        session_id: str | None = None,
        status: str | None = None,
        agent: str | None = None,
        parent_id: str | None = None,
    ) -> list[str]:
        query = RunFilter(ENV, owner, session_id, status, after, 10, agent=agent, parent_id=parent_id, desc=True)
        return [r.id for r in await repo.list_runs(query)]

    assert await ids() == [other.id, turn.id, child.id, parent.id]
    assert await ids(agent="helper") == [other.id, child.id]
    assert await ids(agent="lead", status="queued") == [parent.id]
    assert await ids(status="cancelled") == [turn.id]
    assert await ids(parent_id=parent.id) == [child.id]
    assert await ids(session_id=sid) == [turn.id]
    assert await ids(owner="k1", agent="helper") == [child.id]
    first = await repo.list_runs(RunFilter(ENV, None, None, None, 0, 2, desc=True))
    assert [r.id for r in first] == [other.id, turn.id]
    assert await ids(after=first[-1].seq) == [child.id, parent.id]
    assert await ids(after=first[-1].seq, agent="lead") == [parent.id]
    oldest_first = await repo.list_runs(RunFilter(ENV, None, None, None, 0, 10, agent="helper"))
    assert [r.id for r in oldest_first] == [child.id, other.id]


async def test_decide_only_a_held_run(repo: PlatformFacet) -> None:
    run, _ = await start(repo, new_run())
    assert await repo.decide(ENV, run.id, b"{}", start_inv(run, "resume"), now_ms()) is None
    assert await repo.decide(ENV, "nope", b"{}", start_inv(run, "resume"), now_ms()) is None
    claimed = await claim(repo, token="t-d")
    assert claimed is not None
    await repo.finish(claimed.invocation.id, "t-d", Outcome("hold", b"1"), now_ms())
    assert await repo.decide(ENV, run.id, b"{}", start_inv(run, "resume"), now_ms()) is not None
    assert await repo.decide(ENV, run.id, b"{}", start_inv(run, "resume"), now_ms()) is None  # once


async def test_cancel_queued_held_running_and_done(repo: PlatformFacet) -> None:
    queued, _ = await start(repo, new_run("q"))
    cancelled = await repo.cancel(ENV, queued.id, now_ms())
    assert cancelled is not None and cancelled.status == "cancelled"
    assert not await repo.has_queued(ENV, ["q"], now_ms()) and await claim(repo, "q") is None
    running, _ = await start(repo, new_run("r"))
    claimed = await claim(repo, "r", token="t-r")
    assert claimed is not None
    requested = await repo.cancel(ENV, running.id, now_ms())
    assert requested is not None and (requested.status, requested.cancel_requested) == ("running", True)
    assert await repo.heartbeat(claimed.invocation.id, "t-r", now_ms(), now_ms() + 30_000) is True
    ended = await repo.finish(claimed.invocation.id, "t-r", Outcome("hold", b"1"), now_ms())
    assert ended is not None and ended.status == "cancelled"
    done, _ = await start(repo, new_run("d"))
    claimed = await claim(repo, "d", token="t-dn")
    assert claimed is not None
    await repo.finish(claimed.invocation.id, "t-dn", Outcome("complete", b"1"), now_ms())
    unchanged = await repo.cancel(ENV, done.id, now_ms())
    assert unchanged is not None and unchanged.status == "done"
    assert await repo.cancel(ENV, "nope", now_ms()) is None


async def test_cancel_racing_claims_never_both_wins(repo: PlatformFacet) -> None:
    """A queued run is either cancelled (never claimed) or claimed (then only cancel_requested)."""
    runs = [(await start(repo, new_run("race")))[0] for _ in range(10)]
    claims = [claim(repo, "race") for _ in range(10)]
    cancels = [repo.cancel(ENV, run.id, now_ms()) for run in runs]
    claimed, _ = await asyncio.gather(asyncio.gather(*claims), asyncio.gather(*cancels))
    claimed_ids = {c.run.id for c in claimed if c is not None}
    for run in runs:
        final = await repo.get_run(ENV, run.id)
        assert final is not None
        if run.id in claimed_ids:
            assert (final.status, final.cancel_requested) == ("running", True)
        else:
            assert final.status == "cancelled"


# ---------------------------------------------------------------- invocations


async def test_claims_are_exclusive_under_concurrency(repo: PlatformFacet) -> None:
    runs = [(await start(repo, new_run("work")))[0] for _ in range(20)]
    now = now_ms()
    assert await repo.has_queued(ENV, ["other", "work"], now) and not await repo.has_queued(ENV, ["other"], now)
    results = await asyncio.gather(*(claim(repo, "work") for _ in range(40)))
    claimed = [c for c in results if c is not None]
    assert len(claimed) == 20
    assert sorted(c.run.id for c in claimed) == sorted(r.id for r in runs)
    assert len({c.invocation.id for c in claimed}) == 20
    assert all(c.run.status == "running" and c.invocation.status == "running" for c in claimed)
    assert not await repo.has_queued(ENV, ["work"], now_ms())


async def test_claim_takes_the_oldest_and_only_its_environment_and_agents(repo: PlatformFacet) -> None:
    first, _ = await start(repo, new_run("a"))
    await start(repo, new_run("a"))
    await start(repo, new_run("b"))
    other = await claimer(repo, "other")
    assert await repo.claim("other", ["a", "b"], "t-o", now_ms() + 1000, now_ms(), other) is None
    claimed = await claim(repo, "a")
    assert claimed is not None and claimed.run.id == first.id


async def test_token_context_heartbeat_and_finish(repo: PlatformFacet) -> None:
    sid = await session(repo)
    run, _ = await start(repo, new_run("chat", sid))
    claimed = await claim(repo, token="t-live")
    assert claimed is not None
    ctx = await repo.token_context("t-live")
    assert ctx is not None and (ctx.run_id, ctx.invocation_id, ctx.session_id, ctx.agent, ctx.owner) == (
        run.id,
        claimed.invocation.id,
        sid,
        "chat",
        "k1",
    )
    assert await repo.token_context("t-unknown") is None
    inv_id = claimed.invocation.id
    assert await repo.heartbeat(inv_id, "t-live", now_ms(), now_ms() + 60_000) is False
    assert await repo.heartbeat(inv_id, "t-wrong", now_ms(), now_ms() + 60_000) is None
    ctx = await repo.token_context("t-live")
    assert ctx is not None and ctx.lease_until > now_ms() + 50_000
    assert await repo.token_lease("t-live") == ctx.lease_until
    assert await repo.token_lease("t-unknown") is None
    assert await repo.finish(inv_id, "t-wrong", Outcome("complete", b"1"), now_ms()) is None
    done = await repo.finish(inv_id, "t-live", Outcome("complete", b'{"out":1}'), now_ms())
    assert done is not None and (done.status, done.output, done.error) == ("done", b'{"out":1}', NULL)
    assert await repo.token_context("t-live") is None
    assert await repo.token_lease("t-live") is None
    assert await repo.heartbeat(inv_id, "t-live", now_ms(), now_ms() + 1000) is None
    assert await repo.finish(inv_id, "t-live", Outcome("fail", b"1"), now_ms()) is None


async def test_fail_keeps_the_error(repo: PlatformFacet) -> None:
    await start(repo, new_run())
    claimed = await claim(repo, token="t-f")
    assert claimed is not None
    failed = await repo.finish(claimed.invocation.id, "t-f", Outcome("fail", b'{"type":"X"}'), now_ms())
    assert failed is not None and (failed.status, failed.error) == ("failed", b'{"type":"X"}')


async def test_concurrent_finishes_of_one_invocation_end_it_once(repo: PlatformFacet) -> None:
    await start(repo, new_run())
    claimed = await claim(repo, token="t-once")
    assert claimed is not None
    outcomes = [Outcome(kind, b"1") for kind in ("complete", "fail", "hold")] * 4
    results = await asyncio.gather(*(repo.finish(claimed.invocation.id, "t-once", o, now_ms()) for o in outcomes))
    assert sum(r is not None for r in results) == 1


async def test_expired_lease_interrupts_the_run_once_and_kills_the_token(repo: PlatformFacet) -> None:
    runs = [(await start(repo, new_run("exp")))[0] for _ in range(6)]
    tokens = [f"t-exp-{i}" for i in range(6)]
    for token in tokens:
        assert await claim(repo, "exp", token=token, lease_ms=-1) is not None
    live, _ = await start(repo, new_run("live"))
    assert await claim(repo, "live", token="t-keep", lease_ms=60_000) is not None
    counts = await asyncio.gather(*(repo.expire(now_ms()) for _ in range(5)))
    assert sum(counts) == 6
    assert await repo.expire(now_ms()) == 0
    for run, token in zip(runs, tokens, strict=True):
        final = await repo.get_run(ENV, run.id)
        assert final is not None and final.status == "interrupted"
        assert await repo.token_context(token) is None
        assert await repo.token_lease(token) is None
    still = await repo.get_run(ENV, live.id)
    assert still is not None and still.status == "running"
    assert await repo.token_context("t-keep") is not None


async def test_a_heartbeat_after_the_lease_ran_out_is_refused(repo: PlatformFacet) -> None:
    await start(repo, new_run())
    claimed = await claim(repo, token="t-late", lease_ms=-1)
    assert claimed is not None
    assert await repo.heartbeat(claimed.invocation.id, "t-late", now_ms(), now_ms() + 1000) is None
    assert await repo.finish(claimed.invocation.id, "t-late", Outcome("complete", b"1"), now_ms()) is None


async def test_ping(database: Database) -> None:
    await database.ping()


# ---------------------------------------------------------------- export and import


async def test_dumped_rows_load_into_fresh_sqlite_and_postgres_stores(
    repo: PlatformFacet, backend_url: str, pg_url: str, tmp_path: Path
) -> None:
    """Every table moves with its numbering; a store that dies with its process declares it by refusing."""
    from keepstate.errors import InvalidRequest
    from keepstate.stores.dump import TABLES

    await repo.add_key(StoredKey(uid("key"), ENV, "worker", "w", now_ms()), "moved-key")
    sid = await session(repo, "moved-session")
    held, _ = await start(repo, new_run("mv", sid, idem="i1"))
    claimed = await claim(repo, "mv", token="t-mv")
    assert claimed is not None
    await repo.finish(claimed.invocation.id, "t-mv", Outcome("hold", b'{"q":1}'), now_ms())
    await repo.decide(ENV, held.id, b'{"approved":true}', start_inv(held, "resume"), now_ms())
    try:
        rows = {table: await repo.dump(table) for table in TABLES}
    except InvalidRequest as refused:  # a store that dies with its process declares it by refusing
        assert backend_url.startswith("memory://") and "outlives the process" in refused.message
        return
    for target_url in {pg_url, f"sqlite:///{tmp_path / 'target.db'}"} - {backend_url}:  # fresh stores only
        target = await open_platform(target_url)
        try:
            for table in TABLES:
                assert await target.repo.load(table, rows[table]) == len(rows[table])
                assert await target.repo.load(table, rows[table]) == 0  # rows already there are kept
            assert await target.repo.get_run(ENV, held.id) == await repo.get_run(ENV, held.id)
            assert await target.repo.get_session(ENV, sid) == await repo.get_session(ENV, sid)
            assert (await target.repo.key_by_hash("moved-key")) == (await repo.key_by_hash("moved-key"))
            resumed = await claim(target.repo, "mv")
            assert resumed is not None and (resumed.run.id, resumed.invocation.kind) == (held.id, "resume")
            newer, _ = await start(target.repo, new_run("mv"))  # numbered after every imported row
            listed = await target.repo.list_runs(RunFilter(ENV, None, None, None, 0, 100))
            assert [r.id for r in listed][-1] == newer.id and newer.seq > held.seq
        finally:
            await target.aclose()
