"""keepstate's ADK service refuses a stale update, and only that, on every store, in one process.

A session object A loaded before another writer B wrote a key: A's event whose delta writes that key
is refused with ADK's ``StaleSessionError`` and nothing of it is written (not the event either);
A's events whose delta writes only keys nobody else changed, or no key, are written on top of B's.
For a session key (B through the same session), a ``user:`` key (B through another session of the
user) and an ``app:`` key (B through a session of another user). The same when B's write lands
between A's check and A's write (made to happen there, by construction), which shows the check
and the write are one step. The end-to-end proof with two processes is test_adk_processes.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import Session

from backends import declaring
from keepstate.integrations.adk import KeepstateSessionService
from keepstate.integrations.adk.append import EventWrite

pytestmark = pytest.mark.parametrize("backend_url", declaring("cross_scope_batches"), indirect=True)

APP, USER, SESSION = "shop", "ada", "s"
PARTS = {  # a key of each part, and the (user, session) writer B writes it through
    "session": ("count", (USER, SESSION)),
    "user:": ("user:count", (USER, "another")),
    "app:": ("app:count", ("bob", "theirs")),
}
parts = pytest.mark.parametrize("part", sorted(PARTS))


@pytest.fixture
async def service(backend_url: str) -> AsyncIterator[KeepstateSessionService]:
    opened = KeepstateSessionService(backend_url)
    try:
        yield opened
    finally:
        await opened.close()


def delta(invocation: str, state: dict[str, Any] | None = None, timestamp: float | None = None) -> Event:
    stamp = {} if timestamp is None else {"timestamp": timestamp}
    return Event(invocation_id=invocation, author="tool", actions=EventActions(state_delta=state or {}), **stamp)


async def load(service: KeepstateSessionService, user: str = USER, session_id: str = SESSION) -> Session:
    found = await service.get_session(app_name=APP, user_id=user, session_id=session_id)
    assert found is not None
    return found


async def a_and_b(service: KeepstateSessionService, part: str) -> tuple[str, Session, Session]:
    """(the part's key, counting from 0; session object A; B's session object), both loaded now."""
    key, (user, session_id) = PARTS[part]
    await service.create_session(app_name=APP, user_id=USER, session_id=SESSION, state={key: 0})
    if (user, session_id) != (USER, SESSION):
        await service.create_session(app_name=APP, user_id=user, session_id=session_id)
    return key, await load(service), await load(service, user, session_id)


def names(session: Session) -> list[str]:
    return [event.invocation_id for event in session.events]


@parts
async def test_a_stale_write_of_a_key_another_wrote_is_refused_and_writes_nothing(
    service: KeepstateSessionService, part: str
) -> None:
    key, a, b = await a_and_b(service, part)
    other = key.removesuffix("count") + "other"  # a key of the same part nobody else writes
    b_events = ["b1"] if part == "session" else []
    await service.append_event(b, delta("b1", {key: b.state[key] + 1}))

    with pytest.raises(StaleSessionError, match=key):
        await service.append_event(a, delta("a1", {key: a.state[key] + 1, other: "lost too"}))
    assert (a.state[key], a.events) == (0, [])  # the session object as it was
    stored = await load(service)
    assert (stored.state[key], other in stored.state, names(stored)) == (1, False, b_events)

    await service.append_event(a, delta("a2", {other: "mine"}))  # nobody else wrote it: merged
    await service.append_event(a, delta("a3"))  # no delta: never refused
    stored = await load(service)
    assert (stored.state[key], stored.state[other], names(stored)) == (1, "mine", [*b_events, "a2", "a3"])
    with pytest.raises(StaleSessionError):  # A stays stale on the key until reloaded
        await service.append_event(a, delta("a4", {key: a.state[key] + 1}))

    fresh = await load(service)
    for step in ("a5", "a6"):  # its own writes never make a session object stale
        await service.append_event(fresh, delta(step, {key: fresh.state[key] + 1}))
    stored = await load(service)
    assert (stored.state[key], names(stored)) == (3, [*b_events, "a2", "a3", "a5", "a6"])
    assert stored == fresh  # what it has seen, too


@parts
@pytest.mark.parametrize("same_key", [True, False], ids=["same key", "another key"])
async def test_a_write_landing_between_the_check_and_the_write(
    service: KeepstateSessionService, part: str, same_key: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's append runs just before A's batch, after A read and checked what it writes."""
    key, a, b = await a_and_b(service, part)
    b_key = key if same_key else key + "2"
    write, raced = EventWrite._write, []

    async def b_first(self: EventWrite, *args: Any) -> None:
        if self.item["event"]["invocation_id"] == "a1" and not raced:
            raced.append(True)
            await service.append_event(b, delta("b1", {b_key: 1}))
        await write(self, *args)

    monkeypatch.setattr(EventWrite, "_write", b_first)
    if same_key:
        with pytest.raises(StaleSessionError, match=key):
            await service.append_event(a, delta("a1", {key: a.state[key] + 1}))
    else:
        await service.append_event(a, delta("a1", {key: a.state[key] + 1}))
    assert raced
    stored = await load(service)
    b_events = ["b1"] if part == "session" else []
    assert names(stored) == (b_events if same_key else [*b_events, "a1"])
    assert (stored.state[key], stored.state[b_key]) == (1, 1)


async def test_a_session_object_rebuilt_without_what_it_saw_is_stale_once_the_session_moved_on(
    service: KeepstateSessionService,
) -> None:
    """A session object from JSON (private fields dropped): taken as seeing storage as of its
    ``last_update_time`` (ADK's own rule for such objects), then tracked like any other."""
    await service.create_session(app_name=APP, user_id=USER, session_id=SESSION, state={"count": 0})
    rebuilt = Session.model_validate_json((await load(service)).model_dump_json())
    later = rebuilt.last_update_time
    await service.append_event(rebuilt, delta("r1", {"count": 1}, later + 1))  # nothing happened since
    again = Session.model_validate_json(rebuilt.model_dump_json())
    await service.append_event(await load(service), delta("b1", {"user:other": 1}, later + 2))
    with pytest.raises(StaleSessionError):
        await service.append_event(again, delta("r2", {"count": 2}, later + 3))
    await service.append_event(again, delta("r3", timestamp=later + 4))  # no delta: never refused
    stored = await load(service)
    assert (stored.state["count"], names(stored)) == (1, ["r1", "b1", "r3"])
    await service.append_event(rebuilt, delta("r4", {"count": 2}, later + 5))  # rebuilt saw r1 and wrote since
    assert (await load(service)).state["count"] == 2
