"""Benchmark: an ADK tool's state update, through keepstate's session service and ADK's own.

A turn is what a tool does to a counter: ``get_session`` (state only, ``num_recent_events=0``),
then ``append_event`` of an event whose delta sets ``user:count`` and a session key ``count`` to
one more. keepstate's append reads the objects its delta writes and checks them in the same batch
that writes them (what refuses a stale update); ADK's ``DatabaseSessionService`` on SQLite (aiosqlite)
reads and writes its rows in one transaction. One process, one session each, fresh SQLite files;
the two services take turns (turn i of each before turn i + 1 of either), so a noisy machine
weighs on both alike. ``python -m bench adk_state`` runs it.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.timing import table

TURNS = 300
WARM_UP = 10
APP, USER, SESSION = "bench", "user", "counter"


async def _turn(service: Any) -> float:
    """Seconds for one update of the counters."""
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.adk.sessions.base_session_service import GetSessionConfig

    started = time.perf_counter()
    session = await service.get_session(
        app_name=APP, user_id=USER, session_id=SESSION, config=GetSessionConfig(num_recent_events=0)
    )
    count = session.state.get("count", 0) + 1
    delta = {"user:count": count, "count": count}
    await service.append_event(session, Event(author="tool", actions=EventActions(state_delta=delta)))
    return time.perf_counter() - started


async def _measure(folder: Path) -> tuple[float, float]:
    """(ms per turn through ADK's DatabaseSessionService, through keepstate's service)."""
    from google.adk.sessions import DatabaseSessionService

    from keepstate.integrations.adk import KeepstateSessionService

    services: list[Any] = [
        DatabaseSessionService(f"sqlite+aiosqlite:///{folder / 'adk.db'}"),
        KeepstateSessionService(f"sqlite:///{folder / 'keepstate.db'}"),
    ]
    try:
        for service in services:
            await service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
            for _ in range(WARM_UP):
                await _turn(service)
        spent = [[await _turn(service) for service in services] for _ in range(TURNS)]
        for service in services:
            got = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
            assert got is not None and got.state["count"] == TURNS + WARM_UP, "an update was lost"
    finally:
        for service in services:
            await service.close()
    theirs, ours = (1000 * sum(turn[index] for turn in spent) / TURNS for index in range(2))
    return theirs, ours


def run() -> str:
    with tempfile.TemporaryDirectory(prefix="bench-adk-state-") as folder:
        theirs, ours = asyncio.run(_measure(Path(folder)))
    rows: list[tuple[object, ...]] = [
        ("ADK DatabaseSessionService (SQLite)", theirs, ""),
        ("keepstate KeepstateSessionService (SQLite)", ours, f"{ours / theirs:.2f}x"),
    ]
    return (
        "## ADK state updates\n\n"
        f"A turn: `get_session` (state only), then `append_event` with a `user:` and a session key set to one "
        f"more; {TURNS} turns on fresh SQLite files, the two services taking turns. One process; a noisy 2-core "
        "machine, so compare within a run.\n\n" + table(("service", "ms/turn", "keepstate / ADK"), rows) + "\n"
    )


if __name__ == "__main__":
    print(run())
