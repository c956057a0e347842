"""In-process wake-ups for long polls (claims, run waits), on top of periodic polling.

A change made by this process wakes its waiters at once; a change made by another process
sharing the store is seen at the next poll. ``current()`` is taken *before* checking the
condition, so a notification between the check and the wait is never lost. ``on_notify`` is told of
every notification too: a run's change may have written run events (``RunEventLog.written``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class Notifier:
    def __init__(self, on_notify: Callable[[], None] | None = None) -> None:
        self._event: asyncio.Event | None = None
        self._on_notify = on_notify

    def current(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def notify(self) -> None:
        if self._on_notify is not None:
            self._on_notify()
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self, timeout: float, event: asyncio.Event) -> None:
        """Until ``event`` (from ``current()``) is set, or ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
