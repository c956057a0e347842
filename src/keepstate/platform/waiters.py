"""The streams of one server process waiting for runs' events, by run: what the store's follow wakes.

Each open stream registers one ``asyncio.Event`` under its run for as long as it is open; the store's
``RunEventLog.follow`` (one per process, started by the first stream) names the runs that have new
events and only their streams wake — a thousand idle streams cost nothing but their registration, and
an event wakes the streams of its own run. A stream clears its event *before* it reads, so an event
committed after the read wakes it again: none is missed between a read and a wait.

``follow()`` returns once the store follows (for PostgreSQL, once its LISTEN is in place): a stream
awaits it before its first read, so an event committed after that read always reaches it. If the
following stops for good (an error it cannot get over), the streams that relied on it end — their
clients connect again from their last ``seq`` — and the next stream starts it anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from ..errors import Unavailable
from ..stores.base import RunEventLog

log = logging.getLogger("keepstate.events")


@dataclass(eq=False)
class Watch:
    """One open stream's registration: ``woken`` is set when its run may have new events."""

    waiters: Waiters
    task: asyncio.Task[None] | None
    """The following this stream relies on: when it stops, so does the stream."""
    woken: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def live(self) -> bool:
        return not self.waiters.closed and self.task is not None and not self.task.done()


class Waiters:
    def __init__(self, events: RunEventLog) -> None:
        self._events = events
        self._runs: dict[str, set[asyncio.Event]] = {}
        self._open = 0
        self._watched = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self.closed = False
        """Set when every stream must end: the server stops."""

    async def follow(self) -> None:
        """Return once the store's events are followed (started here if need be); Unavailable when the
        store cannot be followed now, or the server is stopping."""
        if self.closed:
            raise Unavailable("the server is stopping: connect again")
        if self._task is None or self._task.done():
            loop = asyncio.get_running_loop()
            self._ready = loop.create_future()
            self._task = loop.create_task(self._follow(self._ready), name="keepstate run events")
        assert self._ready is not None
        await asyncio.shield(self._ready)

    async def _follow(self, ready: asyncio.Future[None]) -> None:
        try:
            await self._events.follow(self)
        except Exception as error:
            if not ready.done():
                ready.set_exception(error)
                ready.exception()  # retrieved: the streams that await it raise it
            else:
                log.error("run events: following the store stopped; open streams end", exc_info=error)
                self.wake(None)

    @contextlib.contextmanager
    def watch(self, run_id: str) -> Iterator[Watch]:
        """An open stream of ``run_id``, registered while the block runs (after ``follow()``)."""
        watch = Watch(self, self._task)
        woken = watch.woken
        self._runs.setdefault(run_id, set()).add(woken)
        self._open += 1
        self._watched.set()
        try:
            yield watch
        finally:
            waiting = self._runs.get(run_id, set())
            waiting.discard(woken)
            if not waiting:
                self._runs.pop(run_id, None)
            self._open -= 1
            if not self._open:
                self._watched.clear()

    @property
    def open(self) -> int:
        """How many streams are open (registered)."""
        return self._open

    # EventSink: what the store's follow calls
    def wake(self, run_ids: Collection[str] | None) -> None:
        runs = self._runs.values() if run_ids is None else [self._runs.get(run_id, ()) for run_id in run_ids]
        for waiting in runs:
            for woken in waiting:
                woken.set()

    def following(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    async def watched(self) -> None:
        await self._watched.wait()

    def end_streams(self) -> None:
        """Every open stream ends now (after what it is sending), and none opens from now on."""
        self.closed = True
        self.wake(None)

    async def aclose(self) -> None:
        self.end_streams()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
