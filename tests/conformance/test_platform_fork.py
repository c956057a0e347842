"""``Database.fork_session`` on every store that declares a platform: one atomic step that makes the fork's
row and copies every agent's session-scope state into it, cutting the lists it names.

What is checked here is the step itself (copies, versions, cuts, refusals, isolation); the race against a
concurrent writer runs through real servers in ``tests/server/test_server_fork.py``. No test branches on
the backend.
"""

from __future__ import annotations

import itertools

import orjson
import pytest

from backends import declaring
from keepstate.clock import now_ms
from keepstate.errors import NotAList
from keepstate.platform import Platform
from keepstate.stores.base import Database, PlatformFacet, StateFacet
from keepstate.stores.records import StoredSession, namespace

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
ENV = "default"
_ids = itertools.count(1)


@pytest.fixture
def state(platform: Platform) -> StateFacet:
    return platform.state


def uid(prefix: str) -> str:
    return f"{prefix}_{next(_ids)}_{now_ms()}"


def session(session_id: str, parent: str | None = None, owner: str = "k1") -> StoredSession:
    return StoredSession(ENV, session_id, owner, "u1", b"{}", now_ms(), parent=parent)


def ns(agent: str, session_id: str) -> str:
    return namespace(ENV, "session", agent, session_id)


def items(*values: object) -> list[bytes]:
    return [orjson.dumps(value) for value in values]


async def made(repo: PlatformFacet, *agents: str) -> StoredSession:
    """A new session with ``agents`` recorded in it."""
    source, _ = await repo.create_session(session(uid("ses")))
    for agent in agents:
        assert await repo.add_session_agent(source, agent)
    return source


async def listed(state: StateFacet, namespace_: str, key: str) -> tuple[list[object], int]:
    page = await state.items(namespace_, key, 0, 10_000)
    assert page is not None
    return [orjson.loads(item) for item in page.items], page.version


async def test_a_fork_copies_every_agents_state_with_its_versions_and_is_recorded(
    database: Database, repo: PlatformFacet, state: StateFacet
) -> None:
    source = await made(repo, "chat", "critic")
    await state.append(ns("chat", source.id), "messages", items(*range(3000)))  # many segments
    await state.append(ns("chat", source.id), "messages", items("last"))
    await state.put(ns("chat", source.id), "title", b'"hello"', ttl_ms=3_600_000)
    await state.put(ns("critic", source.id), "score", b"1")
    await state.put(ns("critic", source.id), "score", b"2")
    await state.put(ns("critic", source.id), "gone", b"1")
    await state.delete(ns("critic", source.id), "gone")
    fork_id = uid("fork")
    answer = await database.fork_session(source, session(fork_id, source.id, "k2"), {})
    assert answer is not None
    fork, created = answer
    assert created and (fork.id, fork.parent, fork.owner) == (fork_id, source.id, "k2")
    assert await repo.session_agents(ENV, fork_id) == ["chat", "critic"]
    assert await listed(state, ns("chat", fork_id), "messages") == ([*range(3000), "last"], 2)
    title, source_title = await state.get(ns("chat", fork_id), "title"), await state.get(ns("chat", source.id), "title")
    assert title is not None and source_title is not None
    assert (title.data, title.version, title.expires_at) == (b'"hello"', 1, source_title.expires_at)
    score = await state.get(ns("critic", fork_id), "score")
    assert score is not None and (score.data, score.version) == (b"2", 2)
    assert await state.keys(ns("critic", fork_id)) == [("score", 2)]


async def test_writes_to_either_never_show_in_the_other_and_a_fork_deleted_leaves_the_source(
    database: Database, repo: PlatformFacet, state: StateFacet
) -> None:
    source = await made(repo, "chat")
    await state.append(ns("chat", source.id), "messages", items("a", "b"))
    fork_id = uid("fork")
    assert await database.fork_session(source, session(fork_id, source.id), {}) is not None
    await state.append(ns("chat", fork_id), "messages", items("fork"))
    await state.append(ns("chat", source.id), "messages", items("source"))
    await state.put(ns("chat", fork_id), "only_fork", b"1")
    assert await listed(state, ns("chat", source.id), "messages") == (["a", "b", "source"], 2)
    assert await listed(state, ns("chat", fork_id), "messages") == (["a", "b", "fork"], 2)
    assert await state.get(ns("chat", source.id), "only_fork") is None
    assert await database.delete_session(ENV, fork_id, now_ms()) == ["chat"]
    assert await state.keys(ns("chat", fork_id)) == []
    assert await listed(state, ns("chat", source.id), "messages") == (["a", "b", "source"], 2)


async def test_named_lists_are_cut_to_their_first_items_as_one_more_write(
    database: Database, repo: PlatformFacet, state: StateFacet
) -> None:
    source = await made(repo, "chat", "critic")
    await state.append(ns("chat", source.id), "messages", items(*range(2000)), ttl_ms=3_600_000)
    await state.put(ns("chat", source.id), "whole", b"[1,2,3]")
    await state.append(ns("critic", source.id), "notes", items("x", "y"))
    fork_id = uid("fork")
    cuts = {("chat", "messages"): 5, ("chat", "whole"): 1, ("critic", "notes"): 0, ("chat", "absent"): 3}
    assert await database.fork_session(source, session(fork_id, source.id), cuts) is not None
    assert await listed(state, ns("chat", fork_id), "messages") == ([0, 1, 2, 3, 4], 2)
    cut = await state.get(ns("chat", fork_id), "messages")
    kept = await state.get(ns("chat", source.id), "messages")
    assert cut is not None and kept is not None and cut.expires_at == kept.expires_at is not None
    assert await listed(state, ns("chat", fork_id), "whole") == ([1], 2)
    assert await listed(state, ns("critic", fork_id), "notes") == ([], 2)
    assert await state.get(ns("chat", fork_id), "absent") is None
    assert await state.append(ns("chat", fork_id), "messages", items("regenerated")) == (3, 6)
    assert await listed(state, ns("chat", fork_id), "messages") == ([0, 1, 2, 3, 4, "regenerated"], 3)
    assert await listed(state, ns("chat", source.id), "messages") == (list(range(2000)), 1)


async def test_a_named_key_that_is_not_a_list_refuses_the_fork_and_writes_nothing(
    database: Database, repo: PlatformFacet, state: StateFacet
) -> None:
    source = await made(repo, "chat")
    await state.append(ns("chat", source.id), "messages", items(1, 2, 3))
    await state.put(ns("chat", source.id), "title", b'"t"')
    fork_id = uid("fork")
    cuts = {("chat", "messages"): 1, ("chat", "title"): 0}
    with pytest.raises(NotAList):
        await database.fork_session(source, session(fork_id, source.id), cuts)
    assert await repo.get_session(ENV, fork_id) is None
    assert await repo.session_agents(ENV, fork_id) == []
    assert await state.keys(ns("chat", fork_id)) == []


async def test_an_id_used_before_keeps_its_versions_growing(
    database: Database, repo: PlatformFacet, state: StateFacet
) -> None:
    source = await made(repo, "chat")
    await state.put(ns("chat", source.id), "k", b"1")
    earlier = await made(repo, "chat")
    for n in range(5):
        await state.put(ns("chat", earlier.id), "k", str(n).encode())
    await state.put(ns("chat", earlier.id), "stray", b"1")
    assert await database.delete_session(ENV, earlier.id, now_ms()) == ["chat"]
    assert await database.fork_session(source, session(earlier.id, source.id), {}) is not None
    copied = await state.get(ns("chat", earlier.id), "k")
    assert copied is not None and (copied.data, copied.version) == (b"1", 6)
    assert await state.keys(ns("chat", earlier.id)) == [("k", 6)]


async def test_an_existing_id_is_answered_as_it_is_and_a_source_gone_makes_nothing(
    database: Database, repo: PlatformFacet, state: StateFacet
) -> None:
    source = await made(repo, "chat")
    await state.put(ns("chat", source.id), "k", b"1")
    other = await made(repo)
    answer = await database.fork_session(source, session(other.id, source.id), {})
    assert answer == (other, False)
    assert await state.keys(ns("chat", other.id)) == []
    assert await database.delete_session(ENV, source.id, now_ms()) == ["chat"]
    fork_id = uid("fork")
    assert await database.fork_session(source, session(fork_id, source.id), {}) is None
    assert await repo.get_session(ENV, fork_id) is None
    again, _ = await repo.create_session(session(source.id, owner="k9"))  # the id made again: another session
    assert await database.fork_session(source, session(fork_id, source.id), {}) is None
    assert await database.fork_session(again, session(fork_id, again.id), {}) is not None
