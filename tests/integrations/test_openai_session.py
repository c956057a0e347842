"""``KeepstateSession`` on every store: what openai-agents' own suite (run on SQLite) does not ask.

Where its items land (one session-scope list the console reads, the session registered), reads
past one tail read (more than 1,000 items, the whole history, never torn by a concurrent rewrite),
the SDK's limit rules, the 1 MiB bound of a session, closing, and the extra being optional.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import keepstate
from backends import declaring
from keepstate.integrations.openai_agents import AGENT, KEY, KeepstateSession
from keepstate.platform import open_platform
from keepstate.platform.models import Caller

ADMIN = Caller("default", "admin", "key_admin")
every_store = pytest.mark.parametrize("backend_url", declaring(), indirect=True)
shared_stores = pytest.mark.parametrize("backend_url", declaring("shared"), indirect=True)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def texts(items: list[Any]) -> list[str]:
    return [item["content"] for item in items]


@pytest.fixture
async def store(backend_url: str) -> AsyncIterator[keepstate.Store]:
    opened = keepstate.open(backend_url)
    yield opened
    await opened.aclose()
    opened.close()


@pytest.fixture
def session(store: keepstate.Store) -> KeepstateSession:
    return KeepstateSession.from_store(f"ses_{uuid.uuid4().hex[:10]}", store)


@every_store
async def test_items_are_a_session_scope_list_of_a_registered_session_and_go_with_it(
        store: keepstate.Store, session: KeepstateSession) -> None:
    items = [user("Where is my order?"), {"type": "function_call", "call_id": "c1", "name": "track", "arguments": "{}"}]
    await session.add_items(items)
    listed = await store.ascope("session", agent=AGENT, id=session.session_id).items(KEY)
    assert (listed.items, listed.length) == (items, 2)
    if not store.database.capabilities.platform:
        return
    platform = await open_platform(store.url)
    try:
        assert await platform.session_agents(ADMIN, session.session_id) == [AGENT]
        await platform.delete_session(ADMIN, session.session_id)  # as the console's delete does
    finally:
        await platform.aclose()
    assert await session.get_items() == []


@every_store
async def test_an_agent_runs_on_it_turn_after_turn(store: keepstate.Store, session: KeepstateSession) -> None:
    """The SDK's Runner over the session, on each store: the second turn's model input holds the first."""
    from agents import Agent, Runner
    from agents.memory import Session
    from agents.testing import ScriptedModel
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    def reply(text: str) -> ResponseOutputMessage:
        return ResponseOutputMessage(id="1", type="message", role="assistant", status="completed", content=[
            ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])])

    assert isinstance(session, Session)
    model = ScriptedModel()
    agent = Agent(name="support", model=model)
    model.enqueue([reply("It left the depot.")])
    await Runner.run(agent, "Where is my order?", session=session)
    model.enqueue([reply("Tomorrow.")])
    result = await Runner.run(agent, "When will it arrive?", session=session)
    assert result.final_output == "Tomorrow."
    assert [item.get("role") for item in model.calls[-1].input] == ["user", "assistant", "user"]
    stored = await store.ascope("session", agent=AGENT, id=session.session_id).tail(KEY, 10)
    assert [(item["role"], "content" in item) for item in stored] == [("user", True), ("assistant", True)] * 2


@every_store
async def test_sessions_of_one_store_are_apart(store: keepstate.Store) -> None:
    first, second = KeepstateSession.from_store("one", store), KeepstateSession.from_store("two", store)
    await first.add_items([user("a")])
    await second.add_items([user("b1"), user("b2")])
    assert texts([await second.pop_item()]) == ["b2"]
    await second.clear_session()
    assert (texts(await first.get_items()), await second.get_items()) == (["a"], [])


@every_store
async def test_reads_past_one_tail_read_follow_the_sdk_limit_rules(backend_url: str) -> None:
    session = KeepstateSession(f"long_{uuid.uuid4().hex[:8]}", backend_url, session_settings={"limit": 1500})
    try:
        for start in range(0, 2500, 500):
            await session.add_items([user(f"m{i}") for i in range(start, start + 500)])
        every = [f"m{i}" for i in range(2500)]
        assert texts(await session.get_items()) == every[-1500:]  # session_settings.limit
        assert texts(await session.get_items(limit=2001)) == every[-2001:]
        assert texts(await session.get_items(limit=1000)) == every[-1000:]
        assert texts(await session.get_items(limit=3)) == every[-3:]
        assert texts(await session.get_items(limit=-1)) == every  # SQLite's LIMIT -1: no limit
        assert await session.get_items(limit=0) == []
        session.session_settings.limit = None
        assert texts(await session.get_items()) == every
    finally:
        await session.aclose()


@shared_stores
async def test_a_long_read_never_mixes_two_versions_of_the_session(
        backend_url: str, session: KeepstateSession) -> None:
    """A writer in another thread (its own loop and store) replaces the whole history, generation
    after generation, while reads of more than one page go on here: each read is one generation,
    whole, or the empty session between two."""
    size, generations = 1200, 12

    async def rewrite() -> None:
        writer = KeepstateSession(session.session_id, backend_url)
        try:
            for generation in range(generations):
                await writer.clear_session()
                await writer.add_items([user(f"g{generation}-{i}") for i in range(size)])
        finally:
            await writer.aclose()

    thread = threading.Thread(target=asyncio.run, args=(rewrite(),))
    thread.start()
    reads = []
    while thread.is_alive():
        reads.append(texts(await session.get_items()))
    thread.join()
    assert len(reads) > generations
    for got in reads:
        generation = got[0].split("-")[0] if got else None
        assert got == ([] if generation is None else [f"{generation}-{i}" for i in range(size)])


@every_store
async def test_a_session_holds_one_mebibyte_and_a_refused_add_adds_nothing(session: KeepstateSession) -> None:
    await session.add_items([user("x" * 600_000)])
    with pytest.raises(keepstate.TooLarge):
        await session.add_items([user("small"), user("y" * 600_000)])
    assert [len(text) for text in texts(await session.get_items())] == [600_000]


@every_store
async def test_a_closed_session_refuses_every_call_and_a_shared_store_stays_open(
        store: keepstate.Store, session: KeepstateSession) -> None:
    await session.add_items([user("kept")])
    session.close()
    session.close()
    await session.aclose()
    for call in (session.get_items(), session.add_items([]), session.pop_item(), session.clear_session()):
        with pytest.raises(RuntimeError, match="KeepstateSession is closed"):
            await call
    scope = store.ascope("session", agent=AGENT, id=session.session_id)
    assert texts(await scope.tail(KEY, 10)) == ["kept"]


def test_a_session_id_the_store_cannot_name_is_refused(tmp_path: Any) -> None:
    with pytest.raises(keepstate.InvalidKey, match="session id"):
        KeepstateSession("has space", f"sqlite:///{tmp_path / 'store.db'}")


def test_the_framework_is_an_optional_extra() -> None:
    """``import keepstate`` never imports the SDK; without it the adapter names the extra to install."""
    program = (
        "import sys, keepstate, keepstate.integrations\n"
        "assert 'agents' not in sys.modules\n"
        "sys.modules['agents'] = None\n"
        "try:\n"
        "    import keepstate.integrations.openai_agents\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert "pip install 'keepstate[openai-agents]'" in done.stdout
