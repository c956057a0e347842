"""keepstate's ADK session service with two processes on every store several processes can share.

Two writers on one session, each turn ``get_session`` then ``append_event`` as ADK's Runner does
(two_writers.race): every message is kept once, and no writer is told ``StaleSessionError``
(ADK's DatabaseSessionService loses a third of them so, docs/integrations.md). Two writers each
incrementing one counter as an ADK tool does (load the session, append an event whose delta is
``count + 1``, reload and retry on ``StaleSessionError``), a ``user:`` counter through a session
each and a session counter through one session (``app:`` keys take the ``user:`` keys' path;
test_adk_stale.py has every part in one process): the counter ends at exactly the number of
increments, every accepted increment's event is kept once and no refused one. Two writers applying
deltas of keys of their own through session objects they never reload (stale after the other's
first append), to one session or to a session each of the same user: every ``app:``, ``user:`` and
session key either wrote is there at the end and nothing is refused. Two writers whose large events
move one session past 1 MiB onto further lists at once: every event kept once.

``PYTHONPATH=.. python test_adk_processes.py`` (in this folder) runs the state and counter races on
ADK's DatabaseSessionService on SQLite, for the figures in docs/integrations.md.
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import two_writers

from backends import declaring

OPENER = "keepstate ADK"
APP, USER = "race_app", "race_user"
PER_WRITER = 60
_spawn = multiprocessing.get_context("spawn")


pytestmark = pytest.mark.parametrize("backend_url", declaring("shared", "cross_scope_batches"), indirect=True)


@pytest.fixture
def url(backend_url: str) -> str:
    return backend_url


def test_two_writers_on_one_session_keep_every_message_once(url: str) -> None:
    outcome = two_writers.race(OPENER, url, writers=2, per_writer=300)
    assert (outcome.sent, outcome.lost, outcome.duplicated) == (600, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()


def _service(kind: str, url: str) -> Any:
    """A session service of ``kind`` (a key of ``SERVICES``) on ``url``."""
    if kind == "keepstate":
        from keepstate.integrations.adk import KeepstateSessionService

        return KeepstateSessionService(url)
    from google.adk.sessions import DatabaseSessionService

    return DatabaseSessionService(url)


SERVICES = ("keepstate", "DatabaseSessionService")


@dataclass
class StateOutcome:
    """What two writers' state deltas left: the keys written, the ones missing, the errors."""

    written: int
    missing: dict[str, int]
    errors: collections.Counter[str]

    def describe(self) -> str:
        errors = ", ".join(f"{n} × {name}" for name, n in self.errors.most_common()) or "no error raised"
        missing = ", ".join(f"{n} {part}" for part, n in self.missing.items())
        return f"of {self.written} keys per part, missing: {missing}; {errors}"


async def _deltas(kind: str, url: str, writer: int, session_id: str, ready: Any, out: Any) -> None:
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions

    service, errors = _service(kind, url), collections.Counter[str]()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
        ready.wait()
        for index in range(PER_WRITER):
            tag = f"w{writer}.{index}"
            delta = {f"app:{tag}": index, f"user:{tag}": index, f"own:{tag}": index}
            try:
                await service.append_event(
                    session, Event(invocation_id=tag, author="user", actions=EventActions(state_delta=delta))
                )
            except Exception as error:
                errors[type(error).__name__] += 1
    finally:
        await service.close()
        out.put(dict(errors))


def _delta_writer(kind: str, url: str, writer: int, session_id: str, ready: Any, out: Any) -> None:
    asyncio.run(_deltas(kind, url, writer, session_id, ready, out))


async def _create(kind: str, url: str, session_ids: set[str], user: str = USER) -> None:
    service = _service(kind, url)
    try:
        for session_id in session_ids:
            await service.create_session(app_name=APP, user_id=user, session_id=session_id)
    finally:
        await service.close()


async def _final(kind: str, url: str, session_ids: list[str]) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """(every session, the user's state, the app's state as a new session of another user sees it)."""
    service = _service(kind, url)
    try:
        sessions = [await service.get_session(app_name=APP, user_id=USER, session_id=s) for s in session_ids]
        user = {k.removeprefix("user:"): v for k, v in sessions[0].state.items() if k.startswith("user:")}
        other = await service.create_session(app_name=APP, user_id="someone_else")
        return sessions, user, other.state
    finally:
        await service.close()


def _two_writers(
    target: Callable[..., None], args: Callable[[int, Any, Any], tuple[Any, ...]]
) -> collections.Counter[str]:
    """Two processes of ``target(*args(n, barrier, queue))``, started together; the errors they met
    (each puts a dict of counts on the queue). Both must exit cleanly."""
    ready, out = _spawn.Barrier(2), _spawn.Queue()
    writers = [_spawn.Process(target=target, args=args(n, ready, out)) for n in range(2)]
    for process in writers:
        process.start()
    errors = collections.Counter[str]()
    for _ in writers:
        errors.update(out.get(timeout=two_writers.JOIN_TIMEOUT_S))
    for process in writers:
        process.join(two_writers.JOIN_TIMEOUT_S)
        assert process.exitcode == 0, f"writer exited {process.exitcode}"
    return errors


def state_race(kind: str, url: str, sessions: str) -> StateOutcome:
    """Two processes append PER_WRITER events with app:, user: and session deltas each (keys of their
    own), through session objects loaded once, to ``sessions`` ("one session" or "a session each")."""
    session_ids = ["shared", "shared"] if sessions == "one session" else ["first", "second"]
    asyncio.run(_create(kind, url, set(session_ids)))
    errors = _two_writers(_delta_writer, lambda n, ready, out: (kind, url, n, session_ids[n], ready, out))
    stored, user_state, app_view = asyncio.run(_final(kind, url, sorted(set(session_ids))))
    tags = {f"w{n}.{i}" for n in range(2) for i in range(PER_WRITER)}
    own = {key.removeprefix("own:") for session in stored for key in session.state if key.startswith("own:")}
    events = {event.invocation_id for session in stored for event in session.events}
    missing = {
        "app: keys": len(tags - {key.removeprefix("app:") for key in app_view}),
        "user: keys": len(tags - set(user_state)),
        "session keys": len(tags - own),
        "events": len(tags - events),
    }
    return StateOutcome(len(tags), missing, errors)


@pytest.mark.parametrize("sessions", ["one session", "a session each"])
def test_two_writers_of_state_deltas_lose_no_update(url: str, sessions: str) -> None:
    outcome = state_race("keepstate", url, sessions)
    assert set(outcome.missing.values()) == {0} and not outcome.errors, outcome.describe()


INCREMENTS = 150
REFUSED = "refused and retried"
COUNTERS = {  # the counter, and the (user, session) each writer increments it through
    "user:count": ((USER, "first"), (USER, "second")),
    "count": ((USER, "shared"), (USER, "shared")),
}


async def _increments(kind: str, url: str, key: str, writer: int, ready: Any, out: Any) -> None:
    """INCREMENTS increments of ``key`` as an ADK tool makes them, each retried until accepted; an
    attempt's event is named ``w{writer}.{increment}.{attempt}``."""
    from google.adk.errors import StaleSessionError
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.adk.sessions.base_session_service import GetSessionConfig

    (user, session_id), only_state = COUNTERS[key][writer], GetSessionConfig(num_recent_events=0)
    service, errors, refused = _service(kind, url), collections.Counter[str](), 0
    try:
        ready.wait()
        index = attempt = 0
        while index < INCREMENTS and not errors:
            session = await service.get_session(app_name=APP, user_id=user, session_id=session_id, config=only_state)
            delta = {key: session.state.get(key, 0) + 1}
            event = Event(
                invocation_id=f"w{writer}.{index}.{attempt}", author="counter", actions=EventActions(state_delta=delta)
            )
            try:
                await service.append_event(session, event)
                index, attempt = index + 1, 0
            except StaleSessionError:
                attempt, refused = attempt + 1, refused + 1
            except Exception as error:
                errors[type(error).__name__] += 1
    finally:
        await service.close()
        out.put({**errors, REFUSED: refused})


def _increment_writer(kind: str, url: str, key: str, writer: int, ready: Any, out: Any) -> None:
    asyncio.run(_increments(kind, url, key, writer, ready, out))


@dataclass
class CounterOutcome:
    """What two writers' increments of one counter left: its value, the events kept, the errors."""

    count: Any
    kept: list[str]
    errors: collections.Counter[str]
    refused: int

    @property
    def increments(self) -> list[str]:
        """The increment each kept event was an attempt of (``w{writer}.{increment}``), in order."""
        return [name.rsplit(".", 1)[0] for name in self.kept]

    def describe(self) -> str:
        errors = ", ".join(f"{n} × {name}" for name, n in self.errors.most_common()) or "none"
        return (
            f"counter at {self.count} of {2 * INCREMENTS}, {len(self.kept)} events kept, "
            f"{self.refused} attempts refused (StaleSessionError) and retried; other errors: {errors}"
        )


async def _counted(kind: str, url: str, key: str) -> tuple[Any, list[str]]:
    """(the counter as a new load of the first writer's session shows it, every event's name: session
    by session, each in its order)."""
    service = _service(kind, url)
    try:
        sessions = [
            await service.get_session(app_name=APP, user_id=user, session_id=session_id)
            for user, session_id in dict.fromkeys(COUNTERS[key])
        ]
        return sessions[0].state.get(key), [event.invocation_id for s in sessions for event in s.events]
    finally:
        await service.close()


def counter_race(kind: str, url: str, key: str) -> CounterOutcome:
    """Two processes increment ``key`` INCREMENTS times each, through the sessions COUNTERS names."""
    for user, session_id in set(COUNTERS[key]):
        asyncio.run(_create(kind, url, {session_id}, user))
    errors = _two_writers(_increment_writer, lambda n, ready, out: (kind, url, key, n, ready, out))
    refused = errors.pop(REFUSED, 0)
    return CounterOutcome(*asyncio.run(_counted(kind, url, key)), errors, refused)


@pytest.mark.parametrize("key", sorted(COUNTERS))
def test_two_writers_incrementing_one_counter_apply_every_increment_once(url: str, key: str) -> None:
    outcome = counter_race("keepstate", url, key)
    assert not outcome.errors and outcome.count == 2 * INCREMENTS, outcome.describe()
    for writer in range(2):  # every increment's event kept once (a refused attempt never), in order
        assert [name for name in outcome.increments if name.startswith(f"w{writer}.")] == [
            f"w{writer}.{index}" for index in range(INCREMENTS)
        ]
    assert len(outcome.kept) == 2 * INCREMENTS, outcome.describe()


async def _big_events(url: str, writer: int, ready: Any, out: Any) -> None:
    from google.adk.events.event import Event
    from google.genai import types

    service, errors = _service("keepstate", url), collections.Counter[str]()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id="big")
        ready.wait()
        for index in range(BIG_EVENTS):
            text = f"w{writer}.{index}:" + "z" * 250_000
            content = types.Content(role="user", parts=[types.Part(text=text)])
            try:
                await service.append_event(
                    session, Event(invocation_id=f"w{writer}.{index}", author="user", content=content)
                )
            except Exception as error:
                errors[type(error).__name__] += 1
    finally:
        await service.close()
        out.put(dict(errors))


def _big_writer(url: str, writer: int, ready: Any, out: Any) -> None:
    asyncio.run(_big_events(url, writer, ready, out))


BIG_EVENTS = 8


def test_two_writers_past_one_mebibyte_keep_every_event_once(url: str) -> None:
    """Each writer's events move the session on to further lists (4 MB in all), at the same time."""
    asyncio.run(_create("keepstate", url, {"big"}))
    errors = _two_writers(_big_writer, lambda n, ready, out: (url, n, ready, out))
    (stored,), _, _ = asyncio.run(_final("keepstate", url, ["big"]))
    kept = [event.invocation_id for event in stored.events]
    assert not errors and len(kept) == len(set(kept)) == 2 * BIG_EVENTS, (errors, kept)
    for writer in range(2):  # each writer's own events stay in its order
        assert [k for k in kept if k.startswith(f"w{writer}.")] == [f"w{writer}.{i}" for i in range(BIG_EVENTS)]


if __name__ == "__main__":  # the same races on ADK's DatabaseSessionService (SQLite), for the docs
    for mode in ("one session", "a session each"):
        with tempfile.TemporaryDirectory() as folder:
            result = state_race("DatabaseSessionService", f"sqlite+aiosqlite:///{folder}/adk.db", mode)
        print(f"DatabaseSessionService, {mode}: {result.describe()}", flush=True)
    for counter in COUNTERS:
        with tempfile.TemporaryDirectory() as folder:
            counted = counter_race("DatabaseSessionService", f"sqlite+aiosqlite:///{folder}/adk.db", counter)
        print(f"DatabaseSessionService, {counter} incremented: {counted.describe()}", flush=True)
