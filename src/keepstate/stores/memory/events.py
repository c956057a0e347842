"""Run event logs in process memory (``RunEventLog``), for ``memory://`` stores.

Every status change of a memory store's runs goes through ``MemoryPlatform._put``, which writes its
events here in the same step (nothing awaits between), as the SQL stores' triggers do. One process
holds the store, so following is being called back: each append wakes the sinks that follow, on their
own event loops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from ..base import EventSink, RunEventLog
from ..records import OUTPUT_EVENT, STATUS_EVENT, Emitted, NewEvent, StoredEvent, StoredRun, check_event_cap

Live = Callable[[str, str, int], "StoredRun | None"]
"""The running run of a live invocation (id, token hash, now), or None: ``MemoryPlatform._live_run``."""


class MemoryEventLog(RunEventLog):
    def __init__(self, live: Live) -> None:
        self._live = live
        self._logs: dict[str, list[StoredEvent]] = {}
        self._heads: dict[str, int] = {}
        self._sinks: list[tuple[asyncio.AbstractEventLoop, EventSink]] = []

    def status_changed(self, run: StoredRun) -> None:
        """The events of ``run``'s new status (its output first when it is done)."""
        added: list[NewEvent] = []
        if run.status == "done":
            added.append((OUTPUT_EVENT, b'{"output":' + run.output + b"}"))
        added.append((STATUS_EVENT, b'{"status":"' + run.status.encode() + b'"}'))
        self._append(run.id, added, run.updated_at)

    def drop(self, run_ids: Sequence[str]) -> None:
        """The runs' events go (a session's delete); their heads stay, so no ``seq`` comes back."""
        for run_id in run_ids:
            self._logs.pop(run_id, None)

    def forget(self, run_id: str) -> None:
        """The run went (a purge): its events and its head."""
        self._logs.pop(run_id, None)
        self._heads.pop(run_id, None)

    def _append(self, run_id: str, events: Sequence[NewEvent], at: int) -> int:
        last = self._heads.get(run_id, 0)
        log = self._logs.setdefault(run_id, [])
        log.extend(StoredEvent(last + n, kind, data, at) for n, (kind, data) in enumerate(events, 1))
        self._heads[run_id] = last + len(events)
        for loop, sink in self._sinks:
            loop.call_soon_threadsafe(sink.wake, (run_id,))
        return last + len(events)

    async def emit(
        self, invocation_id: str, token_hash: str, events: Sequence[NewEvent], now: int, cap: int
    ) -> Emitted | None:
        run = self._live(invocation_id, token_hash, now)
        if run is None:
            return None
        check_event_cap(self._heads.get(run.id, 0), len(events), cap)
        return Emitted(self._append(run.id, events, now), run.cancel_requested)

    async def read(self, run_id: str, after: int, limit: int) -> list[StoredEvent]:
        log = self._logs.get(run_id, [])
        first = next((index for index, event in enumerate(log) if event.seq > after), len(log))
        return log[first : first + limit]

    async def follow(self, sink: EventSink) -> None:
        entry = (asyncio.get_running_loop(), sink)
        self._sinks.append(entry)
        try:
            sink.following()
            await asyncio.Event().wait()  # until cancelled
        finally:
            self._sinks.remove(entry)
