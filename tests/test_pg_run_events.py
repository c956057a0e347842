"""PostgreSQL's following of run events (``stores/postgres/events.py``), driven in-process where the test
holds the moment in its hand: the listening connection is cut, events commit while nobody listens, and
the follow, once back, wakes every waiter (who then reads them) — without a second write to carry them.

The reconnect's pause is held open by the test (``PostgresEventLog.pause``), so "committed while nobody
listened" is so by construction, not by timing.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from event_sinks import WAIT_S, following, listeners
from keepstate.clock import now_ms
from keepstate.errors import Unavailable
from keepstate.platform import open_platform
from keepstate.platform.waiters import Waiters
from keepstate.stores.postgres.events import PostgresEventLog
from keepstate.stores.records import StoredInvocation, StoredRun
from serverproc import closed_port


async def test_events_committed_while_the_listener_is_away_wake_every_waiter_once_it_is_back(pg_url: str) -> None:
    platform = await open_platform(pg_url)
    try:
        events = platform.repo.events
        assert isinstance(events, PostgresEventLog)
        away, back = asyncio.Event(), asyncio.Event()

        async def held_pause(seconds: float) -> None:
            away.set()
            await back.wait()

        events.pause = held_pause
        async with following(events) as sink:
            assert await asyncio.to_thread(listeners, os.getpid(), True) == 1
            async with asyncio.timeout(WAIT_S):
                await away.wait()
            now = now_ms()
            run = StoredRun("default", "run_away", "chat", "k1", None, None, None, "queued", b"1", now, now)
            invocation = StoredInvocation("inv_away", "default", run.id, "chat", "start", "queued", now)
            await platform.repo.start_run(run, "k1", invocation)  # its run.status commits now, unheard
            assert not sink.told(run.id) and None not in sink.woken
            back.set()
            await sink.woken_for(None)
            assert [event.seq for event in await events.read(run.id, 0, 10)] == [1]
    finally:
        await platform.aclose()


class _Pool:
    """What the follow reads of a pool: its URL."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo


async def test_a_follow_that_cannot_reach_the_store_is_unavailable_before_any_stream_starts() -> None:
    """A stream's route awaits ``Waiters.follow()`` before it answers: a 503, never a stream that hears nothing."""
    with closed_port() as port:
        events = PostgresEventLog(_Pool(f"postgresql://postgres@127.0.0.1:{port}/test"))  # type: ignore[arg-type]
        waiters = Waiters(events)
        with pytest.raises(Unavailable):
            await waiters.follow()
        await waiters.aclose()
