"""``Store.register_session`` / ``aregister_session``: an embedded app's session made known to the platform.

On every store: a platform store (memory, SQLite, PostgreSQL) records the session and its agent, seen
through the platform's own rules (who may see it, its agents, its delete dropping what the app
wrote); a store without platform records (Redis) checks the arguments, writes nothing and answers
False, as documented. The sync face works with no event loop, from inside one and from its threads;
the async face on any loop. Answers branch on the declared capability, never on the backend.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import keepstate
from backends import declaring
from keepstate.clock import now_ms
from keepstate.errors import InvalidRequest, InvalidValue, NotFound, TooLarge
from keepstate.platform import Platform, open_platform
from keepstate.platform.models import Caller
from keepstate.stores.records import namespace
from register_workers import join_apps, start_apps

ADMIN = Caller("default", "admin", "key_admin")
MESSAGE = {"role": "user", "content": "Where is my order?"}


def sid() -> str:
    return f"ses_{uuid.uuid4().hex[:10]}"


def portal_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "keepstate-portal")


@pytest.fixture
def store(backend_url: str) -> Iterator[keepstate.Store]:
    with keepstate.open(backend_url) as opened:
        yield opened


@pytest.fixture
async def platform(backend_url: str) -> AsyncIterator[Platform]:
    opened = await open_platform(backend_url)
    yield opened
    await opened.aclose()


@pytest.mark.parametrize("backend_url", declaring(), indirect=True)
def test_register_answers_on_every_store_as_documented(store: keepstate.Store) -> None:
    session_id = sid()
    answer = store.register_session(session_id, "chat", user="ada", metadata={"channel": "web"})
    if not store.database.capabilities.platform:  # nowhere to keep it: nothing written, False
        assert answer is False
        assert list(store.state.records()) == []
        return
    assert answer is True

    async def read() -> tuple[Any, list[str]]:
        platform = await open_platform(store.url)
        try:
            return await platform.get_session(ADMIN, session_id), await platform.session_agents(ADMIN, session_id)
        finally:
            await platform.aclose()

    found, agents = asyncio.run(read())
    assert (found.owner, found.user, found.metadata) == ("", "ada", b'{"channel":"web"}')
    assert agents == ["chat"]


BAD_ARGUMENTS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"session_id": "has space"}, InvalidRequest, "session_id must be"),
    ({"session_id": ""}, InvalidRequest, "session_id must be"),
    ({"agent": "a/b"}, InvalidRequest, "agent must be"),
    ({"user": "x" * 201}, InvalidRequest, "user must be"),
    ({"owner": ""}, InvalidRequest, "owner must be"),
    ({"env": "no env"}, InvalidRequest, "env must be"),
    ({"metadata": ["not", "an", "object"]}, InvalidRequest, "metadata must be an object"),
    ({"metadata": {"n": float("nan")}}, InvalidValue, "NaN"),
    ({"metadata": {"big": "x" * (1 << 20)}}, TooLarge, "metadata"),
]


@pytest.mark.parametrize("backend_url", declaring(), indirect=True)
@pytest.mark.parametrize(("change", "error", "says"), BAD_ARGUMENTS)
async def test_bad_arguments_are_refused_as_post_sessions_refuses_them_on_every_store(
    store: keepstate.Store, change: dict[str, Any], error: type[Exception], says: str
) -> None:
    arguments: dict[str, Any] = {"session_id": sid(), "agent": "chat", **change}
    with pytest.raises(error, match=says):
        store.register_session(**arguments)
    with pytest.raises(error, match=says):
        await store.aregister_session(**arguments)


platform_stores = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)


@platform_stores
def test_the_sync_call_works_inside_a_running_loop_and_from_its_threads(backend_url: str) -> None:
    session_id = sid()
    store = keepstate.open(backend_url)

    async def app() -> list[str]:
        assert store.register_session(session_id, "in-loop")  # blocks this loop, runs on the store's thread
        await asyncio.gather(*(asyncio.to_thread(store.register_session, session_id, f"thread{i}") for i in range(4)))
        assert await store.aregister_session(session_id, "awaited")
        platform = await open_platform(backend_url)
        try:
            return await platform.session_agents(ADMIN, session_id)
        finally:
            await platform.aclose()
            await store.aclose()

    try:
        agents = asyncio.run(app())
    finally:
        store.close()
    assert agents == ["awaited", "in-loop", "thread0", "thread1", "thread2", "thread3"]


@platform_stores
def test_the_async_call_works_on_one_loop_after_another(store: keepstate.Store, backend_url: str) -> None:
    session_id = sid()

    async def register(agent: str) -> None:
        await store.aregister_session(session_id, agent)
        await store.ascope("session", agent=agent, id=session_id).append("history", [MESSAGE])

    asyncio.run(register("first"))
    asyncio.run(register("second"))
    assert store.register_session(session_id, "third")
    assert [store.scope("session", agent=a, id=session_id).get("history") for a in ("first", "second")] == [
        [MESSAGE],
        [MESSAGE],
    ]


@platform_stores
async def test_an_owner_key_sees_its_session_and_no_owner_leaves_it_to_the_admins(
    store: keepstate.Store, platform: Platform
) -> None:
    owned, unowned, elsewhere = sid(), sid(), sid()
    await store.aregister_session(owned, "chat", owner="key_m1", user="ada")
    await store.aregister_session(unowned, "chat", user="ada")
    await store.aregister_session(elsewhere, "chat", env="other")
    owner, other = Caller("default", "member", "key_m1"), Caller("default", "member", "key_m2")

    assert (await platform.get_session(owner, owned)).owner == "key_m1"
    assert [s.id for s in (await platform.list_sessions(owner, None, None, 100)).items] == [owned]
    for caller, session_id in ((other, owned), (owner, unowned), (ADMIN, elsewhere)):
        with pytest.raises(NotFound):
            await platform.get_session(caller, session_id)
    assert [s.id for s in (await platform.list_sessions(other, None, None, 100)).items] == []
    assert {s.id for s in (await platform.list_sessions(ADMIN, "ada", None, 100)).items} == {owned, unowned}
    assert (await platform.get_session(Caller("other", "admin", "key_o"), elsewhere)).owner == ""


@platform_stores
async def test_deleting_the_session_drops_what_the_app_wrote_and_the_id_starts_empty(
    store: keepstate.Store, platform: Platform
) -> None:
    session_id = sid()
    conversation = store.ascope("session", agent="chat", id=session_id)
    await store.aregister_session(session_id, "chat")
    await conversation.append("history", [MESSAGE, {"role": "assistant", "content": "On its way."}])
    await conversation.put("summary", "an order")
    await platform.delete_session(ADMIN, session_id)
    with pytest.raises(NotFound):
        await platform.get_session(ADMIN, session_id)
    assert await conversation.get("history") is None and await conversation.get("summary") is None

    await store.aregister_session(session_id, "chat", owner="key_new")
    assert [key async for key, _ in conversation.keys()] == []
    assert (await platform.get_session(ADMIN, session_id)).owner == "key_new"


@pytest.mark.parametrize("backend_url", declaring("platform", "shared"), indirect=True)
async def test_apps_in_several_processes_racing_deletes_never_leave_a_registration_behind(
    backend_url: str, platform: Platform
) -> None:
    """Three app processes register and write while this one deletes their sessions again and again.
    A deleted session never keeps a registered agent, and once each app has registered again a
    delete takes everything the apps wrote."""
    sessions, agents = [sid(), sid()], ["p0", "p1", "p2"]
    apps = start_apps(backend_url, agents, sessions, rounds=25)
    deletes = 0
    while any(app.is_alive() for app in apps):
        for session_id in sessions:
            deletes += await platform.database.delete_session("default", session_id, now_ms()) is not None
        await asyncio.sleep(0.005)
    join_apps(apps)
    assert deletes > 0
    for session_id in sessions:
        if await platform.repo.get_session("default", session_id) is None:
            assert await platform.repo.session_agents("default", session_id) == []
    join_apps(start_apps(backend_url, agents, sessions, rounds=1))  # each app registers again, writes once
    for session_id in sessions:
        assert await platform.repo.session_agents("default", session_id) == agents
        found = await platform.repo.get_session("default", session_id)
        assert found is not None and found.owner in {f"key_{a}" for a in agents}
        assert await platform.database.delete_session("default", session_id, now_ms()) == agents
        for agent in agents:
            assert await platform.state.get(namespace("default", "session", agent, session_id), "history") is None


@pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
def test_close_ends_the_stores_loop_thread_and_so_does_the_collector(backend_url: str) -> None:
    before = portal_threads()
    closed = keepstate.open(backend_url)
    closed.register_session(sid(), "chat")
    assert portal_threads() > before
    closed.close()
    closed.close()
    assert portal_threads() == before
    dropped = keepstate.open(backend_url)
    dropped.register_session(sid(), "chat")
    del dropped
    gc.collect()
    assert portal_threads() == before


EXITS = """
import sys, keepstate
store = keepstate.open(sys.argv[1])
assert store.register_session("exiting", "chat")
store.scope("session", agent="chat", id="exiting").append("history", [{"role": "user", "content": "bye"}])
print("wrote", flush=True)
if sys.argv[2] == "close":
    store.close()
"""


@pytest.mark.parametrize("ending", ["close", "exit"])
def test_a_process_that_registered_on_postgres_exits_cleanly(pg_url: str, ending: str) -> None:
    done = subprocess.run([sys.executable, "-c", EXITS, pg_url, ending], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "wrote" in done.stdout, done.stderr[-3000:]
    for dirt in ("Task was destroyed", "Traceback", "Exception ignored", "never awaited"):
        assert dirt not in done.stderr, done.stderr[-3000:]
