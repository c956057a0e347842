"""keepstate's ADK session service with two processes on one SQLite file and on PostgreSQL.

Two writers on one session, each turn ``get_session`` then ``append_event`` as ADK's Runner does
(two_writers.race): every message is kept once, and no writer is told ``StaleSessionError``
(ADK's DatabaseSessionService loses a third of them so, docs/integrations.md). Two writers
applying state deltas through session objects they never reload (stale after the other's first
append), to one session or to a session each of the same user: every ``app:``, ``user:`` and
session key either wrote is there at the end, so no update was lost.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

import pytest
import two_writers

OPENER = "keepstate ADK"
APP, USER = "race_app", "race_user"
PER_WRITER = 120
_spawn = multiprocessing.get_context("spawn")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue({"sqlite": "sqlite_url", "postgres": "pg_url"}[request.param]))


def test_two_writers_on_one_session_keep_every_message_once(url: str) -> None:
    outcome = two_writers.race(OPENER, url, writers=2, per_writer=300)
    assert (outcome.sent, outcome.lost, outcome.duplicated) == (600, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()


async def _deltas(url: str, writer: int, session_id: str, ready: Any) -> None:
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions

    from keepstate.integrations.adk import KeepstateSessionService

    service = KeepstateSessionService(url)
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert session is not None
        ready.wait()
        for index in range(PER_WRITER):
            tag = f"w{writer}.{index}"
            delta = {f"app:{tag}": index, f"user:{tag}": index, f"own:{tag}": index, "user:last": tag}
            await service.append_event(session, Event(invocation_id=tag, author="user",
                                                      actions=EventActions(state_delta=delta)))
    finally:
        await service.close()


def _delta_writer(url: str, writer: int, session_id: str, ready: Any) -> None:
    asyncio.run(_deltas(url, writer, session_id, ready))


async def _create(url: str, session_ids: set[str]) -> None:
    from keepstate.integrations.adk import KeepstateSessionService

    service = KeepstateSessionService(url)
    try:
        for session_id in session_ids:
            await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
    finally:
        await service.close()


async def _final(url: str, session_ids: list[str]) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """(every session, the user's state, the app's state as a new session of another user sees it)."""
    from keepstate.integrations.adk import KeepstateSessionService

    service = KeepstateSessionService(url)
    try:
        sessions = [await service.get_session(app_name=APP, user_id=USER, session_id=s) for s in session_ids]
        user = await service.get_user_state(app_name=APP, user_id=USER)
        other = await service.create_session(app_name=APP, user_id="someone_else")
        return sessions, user, other.state
    finally:
        await service.close()


@pytest.mark.parametrize("sessions", ["one session", "a session each"])
def test_two_writers_of_state_deltas_lose_no_update(url: str, sessions: str) -> None:
    session_ids = ["shared", "shared"] if sessions == "one session" else ["first", "second"]
    asyncio.run(_create(url, set(session_ids)))
    ready = _spawn.Barrier(2)
    writers = [_spawn.Process(target=_delta_writer, args=(url, n, session_ids[n], ready)) for n in range(2)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(two_writers.JOIN_TIMEOUT_S)
        assert process.exitcode == 0, f"writer exited {process.exitcode}"
    stored, user_state, app_view = asyncio.run(_final(url, sorted(set(session_ids))))
    tags = {f"w{n}.{i}" for n in range(2) for i in range(PER_WRITER)}
    assert {key for key in user_state if key != "last"} == tags
    assert user_state["last"] in {f"w{n}.{PER_WRITER - 1}" for n in range(2)}
    assert set(app_view) == {f"app:{tag}" for tag in tags}
    events = [event.invocation_id for session in stored for event in session.events]
    assert sorted(events) == sorted(tags)
    own = {key.removeprefix("own:") for session in stored for key in session.state if key.startswith("own:")}
    assert own == tags
