"""What keepstate's ADK session service holds beyond ADK's contract (test_adk_sessions.py has that).

Sessions past keepstate's 1 MiB list bound (events go on in further lists, read back whole and by
tail across them, also when another writer made and filled the new list first); the console's
view (the session registered, its events a ``{role, content}`` conversation); the whole-read cache
staying right when another service deletes and re-creates a session; names outside keepstate's key
characters; ``from_store``; and ``import keepstate`` importing no framework.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

import keepstate
from keepstate.integrations.adk import KeepstateSessionService, layout
from keepstate.integrations.adk.append import EventWrite
from keepstate.platform import open_platform
from keepstate.platform.models import Caller

APP, USER = "shop", "ada"


def message(text: str, timestamp: float, author: str = "user") -> Event:
    return Event(
        author=author,
        invocation_id=f"i{timestamp}",
        timestamp=timestamp,
        content=types.Content(role="user", parts=[types.Part(text=text)]),
    )


@pytest.fixture
async def service(sqlite_url: str) -> AsyncIterator[KeepstateSessionService]:
    opened = KeepstateSessionService(sqlite_url)
    yield opened
    await opened.close()


def texts(events: list[Event]) -> list[str]:
    return [event.content.parts[0].text or "" for event in events if event.content and event.content.parts]


async def test_a_session_past_one_mebibyte_goes_on_and_reads_back_whole(service: KeepstateSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="long")
    sent = [f"{index}:" + "x" * 300_000 for index in range(8)]  # 2.4 MB: three lists at least
    for index, text in enumerate(sent):
        await service.append_event(session, message(text, timestamp=index + 1))
    got = await service.get_session(app_name=APP, user_id=USER, session_id="long")
    assert got is not None and texts(got.events) == sent
    record = await service.store.ascope("session", agent=APP, id="long").get(f"{USER}.session")
    assert len(record["chunks"]) >= 2

    async def tail(**config: float) -> list[str]:
        found = await service.get_session(
            app_name=APP, user_id=USER, session_id="long", config=GetSessionConfig(**config)
        )
        assert found is not None
        return texts(found.events)

    assert await tail(num_recent_events=5) == sent[-5:]
    assert await tail(after_timestamp=3.0) == sent[2:]
    assert await tail(after_timestamp=2.0, num_recent_events=4) == sent[-4:]


async def test_a_writer_whose_new_list_another_filled_first_moves_on_to_the_next(
    sqlite_url: str, service: KeepstateSessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writer B finds the last list full and goes to a new one; before B's write lands, writer A (another
    process) has made that list and filled it. B's event goes to the list after: it is not "over 1 MiB alone"."""
    session = await service.create_session(app_name=APP, user_id=USER, session_id="long")
    sent = [f"a{index}:" + "x" * 150_000 for index in range(6)]  # three to a list (each held twice in its item)
    for index, text in enumerate(sent[:3]):  # the first list nearly full
        await service.append_event(session, message(text, timestamp=index + 1))
    other = KeepstateSessionService(sqlite_url)
    write_event = EventWrite._write
    raced: list[bool] = []

    async def write_after_a_fills_the_new_list(write: EventWrite, chunk: int, fresh: bool, *rest: Any) -> None:
        if fresh and not raced:
            raced.append(True)
            for index, text in enumerate(sent[3:], start=3):
                await service.append_event(session, message(text, timestamp=index + 1))
        await write_event(write, chunk, fresh, *rest)

    monkeypatch.setattr(EventWrite, "_write", write_after_a_fills_the_new_list)
    try:
        stale = await other.get_session(app_name=APP, user_id=USER, session_id="long")
        assert stale is not None
        await other.append_event(stale, message("b:" + "y" * 150_000, timestamp=7))
    finally:
        await other.close()
    assert raced
    got = await service.get_session(app_name=APP, user_id=USER, session_id="long")
    assert got is not None and texts(got.events) == [*sent, "b:" + "y" * 150_000]
    record = await service.store.ascope("session", agent=APP, id="long").get(f"{USER}.session")
    assert layout.last_chunk(record) == 2  # lists 0 and 1 hold A's events, list 2 B's


async def test_an_event_over_one_mebibyte_alone_is_refused_and_nothing_written(
    service: KeepstateSessionService,
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="big")
    await service.append_event(session, message("small", 1.0))
    with pytest.raises(keepstate.TooLarge):
        await service.append_event(session, message("y" * 1_100_000, 2.0))
    got = await service.get_session(app_name=APP, user_id=USER, session_id="big")
    assert got is not None and texts(got.events) == ["small"] and got.last_update_time == 1.0


async def test_the_console_lists_the_session_and_shows_its_events_as_a_conversation(
    service: KeepstateSessionService,
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="chat-1")
    await service.append_event(session, message("where is my order?", 1.0))
    await service.append_event(session, message("on its way", 2.0, author="shop_agent"))
    stored = await service.store.ascope("session", agent=APP, id="chat-1").get(f"{USER}.events")
    assert [(item["role"], item["content"]) for item in stored] == [
        ("user", "where is my order?"),
        ("shop_agent", "on its way"),
    ]
    platform = await open_platform(service.store.url)
    try:
        admin = Caller("default", "admin", "key_admin")
        found = await platform.get_session(admin, "chat-1")
        assert (found.user, await platform.session_agents(admin, "chat-1")) == (USER, [APP])
    finally:
        await platform.aclose()


async def test_a_session_deleted_from_the_console_can_be_created_again(service: KeepstateSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="gone", state={"k": 1})
    await service.append_event(session, message("before", 1.0))
    platform = await open_platform(service.store.url)
    try:
        await platform.delete_session(Caller("default", "admin", "key_admin"), "gone")
    finally:
        await platform.aclose()
    assert await service.get_session(app_name=APP, user_id=USER, session_id="gone") is None
    assert (await service.list_sessions(app_name=APP, user_id=USER)).sessions == []
    again = await service.create_session(app_name=APP, user_id=USER, session_id="gone")
    assert again.state == {}
    got = await service.get_session(app_name=APP, user_id=USER, session_id="gone")
    assert got is not None and got.events == [] and got.state == {}
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id=USER, session_id="gone")


async def test_a_whole_read_sees_a_session_another_service_deleted_and_created_again(sqlite_url: str) -> None:
    reader, writer = KeepstateSessionService(sqlite_url), KeepstateSessionService(sqlite_url)
    try:
        session = await writer.create_session(app_name=APP, user_id=USER, session_id="again")
        for index in range(3):
            await writer.append_event(session, message(f"old {index}", index + 1))
        first = await reader.get_session(app_name=APP, user_id=USER, session_id="again")
        assert first is not None and texts(first.events) == ["old 0", "old 1", "old 2"]
        await writer.delete_session(app_name=APP, user_id=USER, session_id="again")
        session = await writer.create_session(app_name=APP, user_id=USER, session_id="again")
        empty = await reader.get_session(app_name=APP, user_id=USER, session_id="again")
        assert empty is not None and empty.events == []
        for index in range(4):
            await writer.append_event(session, message(f"new {index}", index + 10))
        again = await reader.get_session(app_name=APP, user_id=USER, session_id="again")
        assert again is not None and texts(again.events) == [f"new {i}" for i in range(4)]
        await writer.append_event(session, message("newer", 20))
        latest = await reader.get_session(app_name=APP, user_id=USER, session_id="again")
        assert latest is not None and texts(latest.events)[-2:] == ["new 3", "newer"]
    finally:
        await reader.close()
        await writer.close()


@pytest.mark.parametrize(
    ("app", "user", "session_id"),
    [
        ("my app", "ada@example.com", "chat #1"),
        ("shop", "h:ada", "x" * 300),
    ],
)
async def test_names_outside_keepstates_key_characters(
    service: KeepstateSessionService, app: str, user: str, session_id: str
) -> None:
    session = await service.create_session(
        app_name=app, user_id=user, session_id=session_id, state={"user:tier": "gold"}
    )
    await service.append_event(session, message("hi", 1.0))
    other = await service.create_session(app_name=app, user_id=user + "2", session_id=session_id)
    got = await service.get_session(app_name=app, user_id=user, session_id=session_id)
    assert got is not None and texts(got.events) == ["hi"] and got.state == {"user:tier": "gold"}
    assert other.state == {} and await service.get_user_state(app_name=app, user_id=user) == {"tier": "gold"}
    listed = (await service.list_sessions(app_name=app, user_id=None)).sessions
    assert sorted((s.user_id, s.id) for s in listed) == sorted([(user, session_id), (user + "2", session_id)])


async def test_from_store_shares_the_store_and_leaves_it_open(sqlite_url: str) -> None:
    with keepstate.open(sqlite_url) as store:
        service = KeepstateSessionService.from_store(store)
        session = await service.create_session(app_name=APP, user_id=USER, session_id="shared")
        await service.aclose()
        events = store.scope("session", agent=APP, id="shared")
        events.append(f"{USER}.events", [])  # the store still works after the service closed
        assert session.id == "shared" and events.items(f"{USER}.events").length == 0


def test_import_keepstate_imports_no_framework() -> None:
    code = "import sys, keepstate; print(any(name.startswith('google.adk') for name in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
    )
    assert result.stdout.strip() == "False"
