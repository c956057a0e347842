"""``KeepstateSession`` on every store: what openai-agents' own suite (run on SQLite) does not ask.

Where its items land (one session-scope list the console reads, the session registered), reads
past one tail read (more than 1,000 items, the whole history, never torn by a concurrent rewrite),
the SDK's limit rules, a session past 1 MiB (parts: adds, tails, whole reads, pops and a clear across
their boundaries, also with another writer at it, an item over 1 MiB alone refused, the console's
view), closing, and the extra being optional.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import keepstate
from backends import declaring
from keepstate.integrations.openai_agents import AGENT, KEY, PARTS, KeepstateSession, part_key
from keepstate.platform import open_platform
from keepstate.platform.models import Caller
from keepstate.server.app import create_app

ADMIN = Caller("default", "admin", "key_admin")
every_store = pytest.mark.parametrize("backend_url", declaring(), indirect=True)
shared_stores = pytest.mark.parametrize("backend_url", declaring("shared"), indirect=True)


HANG_S = 120
"""Bounds a wait on another thread, so a stuck writer fails the test instead of hanging it."""


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
    store: keepstate.Store, session: KeepstateSession
) -> None:
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
        return ResponseOutputMessage(
            id="1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])],
        )

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
async def test_a_long_read_never_mixes_two_versions_of_the_session(backend_url: str, session: KeepstateSession) -> None:
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


def big(text: str, size: int) -> dict[str, Any]:
    """A user item of about ``size`` bytes as JSON, named ``text``."""
    return {"role": "user", "content": text, "tool_output": "x" * size}


async def keys_of(store: keepstate.Store, session: KeepstateSession) -> list[str]:
    return [key async for key, _ in store.ascope("session", agent=AGENT, id=session.session_id).keys()]


@every_store
async def test_a_session_goes_on_past_one_mebibyte_in_parts_read_back_as_one(
    store: keepstate.Store, session: KeepstateSession
) -> None:
    """Over 2 MiB (tool outputs of 100 KB, and one add of 1.5 MiB that spans parts by itself): the
    whole read and the tails follow the order of the adds, the console's key order is history
    order, and the first part is the list ``items`` that a session before parts would be."""
    every = [f"m{i}" for i in range(30)]
    for text in every[:20]:
        await session.add_items([big(text, 100_000)])
    await session.add_items([big(text, 150_000) for text in every[20:30]])  # 1.5 MiB in one add
    assert texts(await session.get_items()) == every
    assert texts(await session.get_items(limit=3)) == every[-3:]
    assert texts(await session.get_items(limit=25)) == every[-25:]  # back over two boundaries
    keys = await keys_of(store, session)
    assert keys[0] == PARTS and keys[-1] == KEY and keys[1:-1] == [part_key(n) for n in range(1, len(keys) - 1)]
    assert len(keys) - 2 >= 2  # at least two parts before items
    scope = store.ascope("session", agent=AGENT, id=session.session_id)
    assert texts((await scope.items(part_key(1))).items) == every[: len((await scope.items(part_key(1))).items)]
    assert texts(await scope.tail(KEY, 1000)) == every[-len(await scope.tail(KEY, 1000)) :]


@every_store
async def test_pop_takes_the_newest_item_back_across_every_part_boundary(
    store: keepstate.Store, session: KeepstateSession
) -> None:
    every = [f"m{i}" for i in range(24)]
    for text in every:
        await session.add_items([big(text, 100_000)])
    popped = [await session.pop_item() for _ in range(10)]
    assert texts(popped) == every[:-11:-1]  # newest first, back past the first boundary
    await session.add_items([user("after pops")])
    assert texts(await session.get_items()) == [*every[:14], "after pops"]
    rest = [await session.pop_item() for _ in range(15)]
    assert texts(rest) == ["after pops", *every[13::-1]]
    assert await session.pop_item() is None and await session.get_items() == []
    assert await keys_of(store, session) == [KEY]  # every part taken back, and their count with them


@every_store
async def test_clear_drops_every_part_in_one_go(store: keepstate.Store, session: KeepstateSession) -> None:
    await session.add_items([big(f"m{i}", 250_000) for i in range(10)])
    assert len(await keys_of(store, session)) >= 3
    await session.clear_session()
    assert (await keys_of(store, session), await session.get_items(), await session.pop_item()) == ([], [], None)
    await session.add_items([user("again")])
    assert texts(await session.get_items()) == ["again"]


@every_store
async def test_an_item_over_one_mebibyte_alone_is_refused_and_its_add_writes_nothing(
    store: keepstate.Store, session: KeepstateSession
) -> None:
    await session.add_items([big("kept", 900_000)])
    before = await keys_of(store, session)
    with pytest.raises(keepstate.TooLarge, match="item 1"):
        await session.add_items([user("small"), user("y" * (1024 * 1024))])
    assert texts(await session.get_items()) == ["kept"]
    assert await keys_of(store, session) == before


@shared_stores
async def test_reads_while_another_writer_passes_boundaries_show_each_item_once_in_order(
    backend_url: str, session: KeepstateSession
) -> None:
    """A writer in another thread (its own loop and store) adds 60 KB items past several 1 MiB
    boundaries while whole reads and tails go on here: each read is a prefix of the writer's items
    (a tail, its end), never an item twice or one missing in between. The two step in turn by
    construction: each add is let go just as a read starts, so every add (each boundary crossing
    among them) has a read running beside it, however fast either side is."""
    sent = [f"w{i}" for i in range(60)]
    let_go, added = threading.Semaphore(0), threading.Semaphore(0)

    async def write() -> None:
        writer = KeepstateSession(session.session_id, backend_url)
        try:
            for text in sent:
                await asyncio.to_thread(let_go.acquire)
                await writer.add_items([big(text, 60_000)])
                added.release()
        finally:
            await writer.aclose()

    async def check_a_read() -> None:
        whole = texts(await session.get_items())
        assert whole == sent[: len(whole)]
        tail = texts(await session.get_items(limit=20))
        end = sent.index(tail[-1]) + 1 if tail else 0
        assert end >= len(whole) and tail == sent[max(0, end - 20) : end]

    thread = threading.Thread(target=asyncio.run, args=(write(),))
    thread.start()
    try:
        for _ in sent:
            let_go.release()  # the next add starts now, while this read runs
            await check_a_read()
            assert await asyncio.to_thread(added.acquire, timeout=HANG_S), "the writer's add never ended"
    finally:
        for _ in sent:
            let_go.release()  # a failed read must not leave the writer waiting
        thread.join(HANG_S)
    assert texts(await session.get_items()) == sent


@shared_stores
async def test_small_adds_while_another_writer_archives_a_part_are_all_kept(
    backend_url: str, session: KeepstateSession
) -> None:
    """Two writers in threads (each its own loop and store): one adds 150 KB items, so it archives
    a part every seventh add, while the other's small items still fit in ``items``: every item is
    kept once, each writer's in its order."""
    sent = {"big": [f"b{i}" for i in range(30)], "small": [f"s{i}" for i in range(300)]}

    async def write(name: str) -> None:
        writer = KeepstateSession(session.session_id, backend_url)
        try:
            for text in sent[name]:
                await writer.add_items([big(text, 150_000) if name == "big" else user(text)])
        finally:
            await writer.aclose()

    threads = [threading.Thread(target=asyncio.run, args=(write(name),)) for name in sent]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kept = texts(await session.get_items())
    assert sorted(kept) == sorted(sent["big"] + sent["small"])
    assert [text for text in kept if text[0] == "b"] == sent["big"]
    assert [text for text in kept if text[0] == "s"] == sent["small"]


@shared_stores
async def test_pops_taking_parts_back_while_another_writer_adds_take_each_item_once(
    backend_url: str, session: KeepstateSession
) -> None:
    """Pops here empty ``items`` again and again and take parts back while a writer in another
    thread adds: every item is popped once or is still there, none lost, none twice."""
    seeded = [f"s{i}" for i in range(30)]
    for text in seeded:
        await session.add_items([big(text, 100_000)])
    added = [f"a{i}" for i in range(40)]

    async def write() -> None:
        writer = KeepstateSession(session.session_id, backend_url)
        try:
            for text in added:
                await writer.add_items([user(text)])
                await asyncio.sleep(0.002)
        finally:
            await writer.aclose()

    thread = threading.Thread(target=asyncio.run, args=(write(),))
    thread.start()
    popped = []
    while thread.is_alive() or popped[-1:] != [None]:
        item = await session.pop_item()
        popped.append(None if item is None else item["content"])
    thread.join()
    taken = [text for text in popped if text is not None]
    left = texts(await session.get_items())
    assert sorted(taken + left) == sorted(seeded + added) and len(set(taken)) == len(taken)
    assert set(seeded) <= set(taken)


async def test_the_console_shows_a_session_past_one_mebibyte_in_history_order(sqlite_url: str) -> None:
    """The console's session page (the app in this process, signed in as an admin) shows the parts
    oldest first and then ``items`` as one conversation: every message once, in order, part after part."""
    session = KeepstateSession("long-chat", sqlite_url)
    try:
        for index in range(12):
            await session.add_items([big(f"message {index}", 200_000)])
    finally:
        await session.aclose()
    app = create_app(sqlite_url)
    async with app.router.lifespan_context(app):
        _, secret = await app.state.platform.create_key("default", "admin", "console test")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test") as client:
            form = re.search(r'name="form" value="([^"]+)"', (await client.get("/console/")).text)
            assert form is not None
            signed = await client.post(
                "/console/sign-in",
                data={"form": form.group(1), "key": secret},
                headers={"Origin": "http://console.test"},
            )
            assert signed.status_code == 303, signed.text
            page = (await client.get("/console/sessions/long-chat")).text
    assert page.count('<section class="adapter-conversation"') == 1  # the parts read as one conversation
    assert all(page.count(f"message {index}<") == 1 for index in range(12))
    positions = [page.index(f"message {index}<") if f"message {index}<" in page else -1 for index in range(12)]
    assert -1 not in positions and positions == sorted(positions)


@every_store
async def test_a_closed_session_refuses_every_call_and_a_shared_store_stays_open(
    store: keepstate.Store, session: KeepstateSession
) -> None:
    await session.add_items([user("kept")])
    session.close()
    session.close()
    await session.aclose()
    for call in (session.get_items(), session.add_items([]), session.pop_item(), session.clear_session()):
        with pytest.raises(keepstate.StoreClosed, match="KeepstateSession is closed"):
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
