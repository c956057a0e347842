"""``PlatformFacet.register_session`` and what it changes, on every store that declares a platform.

An embedded app registers the agent that keeps state in a session it made without a run; the session
then lists that agent (``session_agents``: the console shows its state) and its delete drops that
state and the registration, as it does for the agents of its runs, so an id made again later starts
empty. Each step is atomic against a concurrent delete: the races here fire many at once (on
PostgreSQL each on its own pooled connection). No test branches on the backend.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from backends import declaring
from claimers import claimer
from keepstate.clock import now_ms
from keepstate.errors import InvalidRequest
from keepstate.platform import open_platform
from keepstate.stores.base import Database, PlatformFacet, StateFacet
from keepstate.stores.records import Outcome, StoredInvocation, StoredRun, StoredSession, namespace

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
ENV = "default"
_ids = itertools.count(1)


def uid(prefix: str) -> str:
    return f"{prefix}_{next(_ids)}_{now_ms()}"


def registered(session_id: str, owner: str = "", user: str | None = "u1", metadata: bytes = b"{}") -> StoredSession:
    return StoredSession(ENV, session_id, owner, user, metadata, now_ms())


def session_ns(agent: str, session_id: str) -> str:
    return namespace(ENV, "session", agent, session_id)


async def finished_run(repo: PlatformFacet, agent: str, session_id: str) -> StoredRun:
    """A run of ``agent`` in the session, claimed and completed (a session with it is idle)."""
    now = now_ms()
    run = StoredRun(ENV, uid("run"), agent, "k1", session_id, None, None, "queued", b"{}", now, now)
    invocation = StoredInvocation(uid("inv"), ENV, run.id, agent, "start", "queued", now)
    stored, _ = await repo.start_run(run, "k1", invocation)
    token = uid("tok")
    claimed = await repo.claim(ENV, [agent], token, now_ms() + 30_000, now_ms(), await claimer(repo, ENV))
    assert claimed is not None and claimed.run.id == stored.id
    await repo.finish(claimed.invocation.id, token, Outcome("complete", b"1"), now_ms())
    return stored


async def test_register_creates_the_session_once_and_keeps_what_it_was_made_with(repo: PlatformFacet) -> None:
    sid = uid("ses")
    first, created = await repo.register_session(registered(sid, metadata=b'{"a":1}'), "chat")
    assert created and (first.owner, first.user, first.metadata) == ("", "u1", b'{"a":1}')
    again, created = await repo.register_session(registered(sid, "k2", "u2", b'{"b":2}'), "critic")
    assert not created and again == first  # owner, user, metadata and seq as they were
    assert await repo.get_session(ENV, sid) == first
    assert await repo.session_agents(ENV, sid) == ["chat", "critic"]
    assert await repo.session_agents("other", sid) == []
    listed = await repo.list_sessions(ENV, None, None, 0, 100)
    assert [s.id for s in listed] == [sid]


async def test_register_in_a_session_made_by_the_api_keeps_its_owner(repo: PlatformFacet) -> None:
    sid = uid("ses")
    made, _ = await repo.create_session(StoredSession(ENV, sid, "k1", "ada", b'{"topic":"x"}', now_ms()))
    stored, created = await repo.register_session(registered(sid), "chat")
    assert not created and stored == made
    assert await repo.list_sessions(ENV, "k1", None, 0, 10) == [made]  # still the member's


async def test_session_agents_are_those_of_its_runs_and_the_registered_ones_each_once(repo: PlatformFacet) -> None:
    sid = uid("ses")
    await repo.register_session(registered(sid), "writer")
    await repo.register_session(registered(sid), "writer")
    await finished_run(repo, "writer", sid)
    await finished_run(repo, "critic", sid)
    await repo.register_session(registered(sid), "archivist")
    assert await repo.session_agents(ENV, sid) == ["archivist", "critic", "writer"]


async def test_concurrent_registrations_create_the_session_once_and_record_every_agent(repo: PlatformFacet) -> None:
    sid = uid("ses")
    answers = await asyncio.gather(
        *(repo.register_session(registered(sid, f"k{i}"), f"agent{i % 4}") for i in range(12))
    )
    assert sum(created for _, created in answers) == 1
    assert len({stored.owner for stored, _ in answers}) == 1
    assert await repo.session_agents(ENV, sid) == ["agent0", "agent1", "agent2", "agent3"]


async def _conversation(repo: PlatformFacet, state: StateFacet) -> str:
    """A session where ``embedded`` is registered and ``worker`` ran, each with a history; its id."""
    sid = uid("ses")
    await repo.register_session(registered(sid), "embedded")
    await finished_run(repo, "worker", sid)
    for agent in ("embedded", "worker"):
        await state.append(session_ns(agent, sid), "history", [b'{"role":"user","content":"hi"}'])
    return sid


async def test_delete_drops_the_registered_agents_state_and_an_id_made_again_starts_empty(
    repo: PlatformFacet, database: Database
) -> None:
    state = await database.state()
    sid = await _conversation(repo, state)
    await state.put(session_ns("embedded", "other-session"), "k", b"1")  # another session's: kept
    assert await database.delete_session(ENV, sid, now_ms()) == ["embedded", "worker"]
    assert await state.get(session_ns("embedded", sid), "history") is None
    assert await state.get(session_ns("worker", sid), "history") is None
    assert await state.get(session_ns("embedded", "other-session"), "k") is not None
    assert await repo.session_agents(ENV, sid) == ["worker"]  # its run is kept, its registration is not

    made, created = await repo.create_session(StoredSession(ENV, sid, "k2", None, b"{}", now_ms()))
    assert created and made.owner == "k2"
    assert await state.keys(session_ns("embedded", sid)) == []
    assert await repo.session_agents(ENV, sid) == ["worker"]
    assert await database.delete_session(ENV, sid, now_ms()) == ["worker"]


async def test_a_registration_racing_a_delete_never_leaves_an_agent_behind(
    repo: PlatformFacet, database: Database
) -> None:
    """Either the delete came first (the session is made anew, with only the racing agent) or the
    registration did (the delete takes both agents): never a registered agent of a deleted session,
    whose state a session made again with that id would see."""
    for _ in range(30):
        sid = uid("ses")
        await repo.register_session(registered(sid), "first")
        registration, deleted = await asyncio.gather(
            repo.register_session(registered(sid), "racing"), database.delete_session(ENV, sid, now_ms())
        )
        alive = await repo.get_session(ENV, sid)
        agents = await repo.session_agents(ENV, sid)
        if alive is None:  # the registration came first
            assert deleted == ["first", "racing"] and not registration[1] and agents == []
        else:
            assert deleted == ["first"] and registration[1] and agents == ["racing"]
        await database.delete_session(ENV, sid, now_ms())


async def test_a_purge_of_its_runs_keeps_a_sessions_agents_so_its_delete_still_drops_their_state(
    repo: PlatformFacet, database: Database
) -> None:
    """The agent of a purged run is still the session's: its state goes with the session's delete,
    and the id made again starts empty (a purge must not leave another owner that state)."""
    state = await database.state()
    sid = await _conversation(repo, state)
    assert await repo.purge_runs(now_ms() + 1_000, 100) == 1
    assert await repo.session_agents(ENV, sid) == ["embedded", "worker"]
    assert await database.delete_session(ENV, sid, now_ms()) == ["embedded", "worker"]
    for agent in ("embedded", "worker"):
        assert await state.get(session_ns(agent, sid), "history") is None
    await repo.create_session(StoredSession(ENV, sid, "k2", None, b"{}", now_ms()))
    assert await state.keys(session_ns("worker", sid)) == []


async def test_registered_agents_move_with_a_dump(
    repo: PlatformFacet, backend_url: str, pg_url: str, tmp_path: Path
) -> None:
    from keepstate.stores.dump import TABLES

    sid = uid("ses")
    await repo.register_session(registered(sid, "k1"), "embedded")
    await repo.register_session(registered(sid), "second")
    try:
        rows = {table: await repo.dump(table) for table in TABLES}
    except InvalidRequest:  # a store that dies with its process refuses (test_platform_repo checks how)
        return
    assert len(rows["ks_session_agents"]) == 2
    for target_url in {pg_url, f"sqlite:///{tmp_path / 'target.db'}"} - {backend_url}:
        target = await open_platform(target_url)
        try:
            for table in TABLES:
                assert await target.repo.load(table, rows[table]) == len(rows[table])
            assert await target.repo.session_agents(ENV, sid) == ["embedded", "second"]
            assert await target.repo.get_session(ENV, sid) == await repo.get_session(ENV, sid)
            assert await target.database.delete_session(ENV, sid, now_ms()) == ["embedded", "second"]
            assert await target.repo.session_agents(ENV, sid) == []
        finally:
            await target.aclose()


async def test_an_agent_is_added_only_to_the_very_session_it_was_read_from(
    repo: PlatformFacet, database: Database
) -> None:
    """``add_session_agent`` records the agent in the session as it was read; once that session is
    deleted (and its id made again, by another owner) it answers False and records nothing."""
    sid = uid("ses")
    first, _ = await repo.create_session(StoredSession(ENV, sid, "k1", None, b"{}", now_ms()))
    assert await repo.add_session_agent(first, "notes")
    assert await repo.session_agents(ENV, sid) == ["notes"]
    assert await database.delete_session(ENV, sid, now_ms()) == ["notes"]
    assert not await repo.add_session_agent(first, "notes")
    second, _ = await repo.create_session(StoredSession(ENV, sid, "k2", None, b"{}", now_ms()))
    assert not await repo.add_session_agent(first, "notes")
    assert await repo.session_agents(ENV, sid) == []
    assert await repo.add_session_agent(second, "notes")
    assert await database.delete_session(ENV, sid, now_ms()) == ["notes"]
