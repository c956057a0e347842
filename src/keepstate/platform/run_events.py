"""Run events: a worker emits into its run's log, callers read it a page at a time or follow it.

The log itself is the store's (``RunEventLog``: ``seq`` per run, the platform's ``run.status`` and
``run.output`` written with each status change); this module holds the rules around it: what an event
may be (a type of 1-64 of ``a-z 0-9 . _ -``, never ``run.``; data at most 64 KiB), who may write (the
run token of a running invocation) and read (the run's owner, an admin), and when a log is over.

A log is over after the event that gives its run a final status (``records.FINAL``: done, failed,
cancelled, expired, interrupted — an interrupted run is never resumed, so nothing can follow it): a
page's ``next`` is then null and a stream ends. ``held`` is not final: a held run's stream stays open
through the decision and the resume.

A stream (``stream``) waits on the process's ``Waiters`` — woken only for its own run, by whichever
server wrote the event — and costs nothing while idle but a keep-alive every ``keepalive`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from ..clock import now_ms
from ..errors import Unauthorized
from ..event_rules import check_events
from ..protocol import (
    MAX_RUN_EVENTS,
)
from ..stores.records import FINAL, Emitted, StoredEvent, StoredRun
from . import auth
from .models import Caller
from .service import Platform, require
from .waiters import Waiters

KEEPALIVE_S = 15.0
"""A stream idle this long sends a comment line, so proxies and clients know it lives."""
KEEPALIVE_ENV = "KEEPSTATE_EVENTS_KEEPALIVE"
"""Seconds between keep-alives instead of ``KEEPALIVE_S`` (for tests; not a documented setting)."""
STREAM_PAGE = 1000
"""A stream reads at most this many events at a time."""


def keepalive_from_env() -> float:
    text = os.environ.get(KEEPALIVE_ENV)
    return float(text) if text else KEEPALIVE_S


class RunEvents:
    """The run events of one server process: its ``Waiters`` and the calls of the two routes."""

    def __init__(self, platform: Platform, keepalive: float = KEEPALIVE_S) -> None:
        self.platform = platform
        self.log = platform.repo.events
        self.waiters = Waiters(self.log)
        self.keepalive = keepalive

    async def aclose(self) -> None:
        await self.waiters.aclose()

    async def emit(self, token: str | None, invocation_id: str, body: dict[str, Any]) -> Emitted:
        """Append the body's events to the token's run, all or none: the last ``seq`` and ``cancel_requested``.
        Unauthorized unless the token's invocation runs (never after its run's final event)."""
        events = check_events(body.get("events"))
        if not token:
            raise Unauthorized("missing run token: send x-agentos-run-token")
        token_hash = auth.hash_secret(token)
        emitted = await self.log.emit(invocation_id, token_hash, events, now_ms(), MAX_RUN_EVENTS)
        if emitted is None:
            raise Unauthorized("run token is not valid for this invocation (not running, or lease ran out)")
        self.log.written()
        return emitted

    async def page(self, caller: Caller, run_id: str, after: int, limit: int) -> tuple[list[StoredEvent], int | None]:
        """Up to ``limit`` events after ``after``, and ``next``: the ``after`` of the next call (the last
        ``seq`` given, or ``after`` itself), None once the page holds the run's last event ever."""
        require(caller, "admin", "member")
        run = await self.platform.visible_run(caller, run_id, expire=True)  # read before the events: see next_after
        events = await self.log.read(run_id, after, limit)
        return events, next_after(run, events, after)

    async def open_stream(self, caller: Caller, run_id: str, after: int) -> AsyncIterator[list[StoredEvent]]:
        """``stream``, once the caller may see the run and the store is followed (NotFound, Unavailable
        are raised here, before anything is sent)."""
        require(caller, "admin", "member")
        await self.platform.visible_run(caller, run_id, expire=True)
        await self.waiters.follow()
        return self.stream(caller, run_id, after)

    async def stream(self, caller: Caller, run_id: str, after: int) -> AsyncIterator[list[StoredEvent]]:
        """The run's events after ``after`` in ``seq`` order, a batch at a time, as they are written, until
        the one that ends the run; an empty batch when nothing came for ``keepalive`` seconds. Ends early
        when the server stops (the client connects again from its last ``seq``)."""
        loop = asyncio.get_running_loop()
        with self.waiters.watch(run_id) as watch:
            quiet_since = loop.time()
            while watch.live:
                watch.woken.clear()  # before the read: a commit after it wakes us again
                events, ended = await self._next(caller.env, run_id, after)
                if events:
                    await self.platform.recheck(caller)
                    yield events
                    after, quiet_since = events[-1].seq, loop.time()
                if ended:
                    return
                while len(events) < STREAM_PAGE and not watch.woken.is_set() and watch.live:
                    left = quiet_since + self.keepalive - loop.time()
                    if left <= 0:
                        yield []  # no read: an idle stream costs a keep-alive, nothing more
                        quiet_since = loop.time()
                    else:
                        await woken_within(watch.woken, left)

    async def _next(self, env: str, run_id: str, after: int) -> tuple[list[StoredEvent], bool]:
        """The next events and whether the log is over. The run's status is read before the events it
        is judged with: its final event commits with it, so a final status read first means the events
        read next hold that event (or it went, with the run or its session)."""
        events = await self.log.read(run_id, after, STREAM_PAGE)
        if events:
            return events, events[-1].ends
        run = await self.platform.repo.get_run(env, run_id)
        if run is not None and run.status not in FINAL:
            return [], False
        events = await self.log.read(run_id, after, STREAM_PAGE)
        return events, not events or events[-1].ends


async def woken_within(woken: asyncio.Event, seconds: float) -> None:
    """Until ``woken`` is set, or ``seconds`` passed."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(woken.wait(), seconds)


def next_after(run: StoredRun, events: list[StoredEvent], after: int) -> int | None:
    """A page's ``next``, ``run`` read before ``events``: None when no event can come after the page."""
    if events:
        return None if events[-1].ends else events[-1].seq
    return None if run.status in FINAL else after
