"""Give a backend written in one style the other face, without rewriting its logic.

``InlineAsync``: the async face of an in-process sync backend whose calls never block for long
(memory). ``Portal``: the sync face of an async backend (PostgreSQL, Redis), running its
coroutines on one private event-loop thread.

Both faces must also *end* cleanly: a pool left open keeps worker tasks that, at interpreter
exit, are destroyed pending ("Task was destroyed but it is pending!"). So what a user forgets to
close is closed by a weakref finaliser (which also runs at exit), on the loop the resource belongs
to, bounded by ``CLOSE_WAIT_S`` and quiet: ``Portal`` for its backend, and ``close_on_loop`` for
async resources opened on the caller's loop (the session store's pool or Redis client).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from .base import Backend, Entry, StateRecord, SyncBackend

T = TypeVar("T")
Closer = Callable[[], Awaitable[None]]
CLOSE_WAIT_S = 5.0
"""Longest a close waits for a backend, then for the tasks left on a loop: exit never hangs on it."""


class InlineAsync(Backend):
    """Async face of a sync backend, calling it on the event loop's thread."""

    def __init__(self, sync: SyncBackend) -> None:
        self.sync = sync

    async def get(self, ns: str, key: str) -> Entry | None:
        return self.sync.get(ns, key)

    async def put(self, ns: str, key: str, data: bytes, if_version: int | None = None) -> int:
        return self.sync.put(ns, key, data, if_version)

    async def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        return self.sync.delete(ns, key, if_version)

    async def append(self, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]:
        return self.sync.append(ns, key, items)

    async def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        return self.sync.keys(ns, prefix, after, limit)

    async def drop(self, ns: str) -> None:
        self.sync.drop(ns)

    async def records(self) -> AsyncIterator[StateRecord]:  # type: ignore[override]
        for record in self.sync.records():
            yield record

    async def restore(self, record: StateRecord) -> None:
        self.sync.restore(record)

    async def ping(self) -> None:
        self.sync.ping()

    async def aclose(self) -> None:
        self.sync.close()


class EventLoopThread:
    """A private event loop on a daemon thread, for running coroutines from sync code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="keepstate-portal", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:  # e.g. a finaliser run by GC on this thread
            coro.close()
            raise RuntimeError("a portal call from its own loop thread would wait for itself")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Cancel and await what still runs on the loop (as ``asyncio.run`` does), then close it."""
        if self.loop.is_closed():
            return
        with contextlib.suppress(Exception):  # a task deaf to cancellation: give up after the bound
            self.run(_cancel_the_rest(), timeout=CLOSE_WAIT_S + 1)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=CLOSE_WAIT_S)
        if not self._thread.is_alive():
            self.loop.close()


async def _cancel_the_rest() -> None:
    others = asyncio.all_tasks() - {asyncio.current_task()}
    for task in others:
        task.cancel()
    if others:
        done, _ = await asyncio.wait(others, timeout=CLOSE_WAIT_S)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: a task that failed while closing has nothing left to say
    await asyncio.get_running_loop().shutdown_asyncgens()


class Portal:
    """Sync face of an async backend; the backend lives on its own loop thread.

    ``close()`` closes the backend, then the loop; again is a no-op. A portal never closed is
    closed the same way, quietly, when it is garbage-collected or at interpreter exit.
    """

    def __init__(self, backend: Backend, loop: EventLoopThread) -> None:
        self.backend = backend
        self._loop = loop
        self._finalizer = weakref.finalize(self, _close_quietly, backend, loop)

    @classmethod
    def open(cls, opener: Any, url: str) -> Portal:
        """Open ``opener(url)`` (an async backend factory) on a fresh loop thread."""
        loop = EventLoopThread()
        try:
            return cls(loop.run(opener(url)), loop)
        except BaseException:
            loop.stop()
            raise

    def get(self, ns: str, key: str) -> Entry | None:
        return self._loop.run(self.backend.get(ns, key))

    def put(self, ns: str, key: str, data: bytes, if_version: int | None = None) -> int:
        return self._loop.run(self.backend.put(ns, key, data, if_version))

    def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        return self._loop.run(self.backend.delete(ns, key, if_version))

    def append(self, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]:
        return self._loop.run(self.backend.append(ns, key, items))

    def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        return self._loop.run(self.backend.keys(ns, prefix, after, limit))

    def drop(self, ns: str) -> None:
        self._loop.run(self.backend.drop(ns))

    def records(self) -> Iterator[StateRecord]:
        async def collect() -> list[StateRecord]:
            return [record async for record in self.backend.records()]

        yield from self._loop.run(collect())

    def restore(self, record: StateRecord) -> None:
        self._loop.run(self.backend.restore(record))

    def ping(self) -> None:
        self._loop.run(self.backend.ping())

    def close(self) -> None:
        if self._finalizer.detach() is not None:
            _close(self.backend, self._loop)


def _close(backend: Backend, loop: EventLoopThread) -> None:
    try:
        loop.run(backend.aclose(), timeout=CLOSE_WAIT_S)
    finally:
        loop.stop()


def _close_quietly(backend: Backend, loop: EventLoopThread) -> None:
    """The finaliser: at exit or on GC nobody can handle an error, so none is raised or printed."""
    with contextlib.suppress(Exception):
        _close(backend, loop)


def cancel_requests() -> int:
    """How many cancellations of the current task are pending (``Task.cancelling()``; 0 off a task)."""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def raise_lost_cancel(before: int) -> None:
    """Raise the cancellation a driver swallowed since ``before = cancel_requests()``.

    On Python 3.11 ``asyncio.wait_for`` (psycopg_pool's connection wait, redis-py's send) loses a
    cancellation that lands in the loop step its inner work completes (CPython gh-86296): the call
    returns normally and the task goes on as if never cancelled. ``cancelling()`` still counts the
    request (only ``uncancel()``, as ``asyncio.timeout`` uses, takes it back), so it is raised here.
    """
    if cancel_requests() > before:
        raise asyncio.CancelledError("cancelled during a driver call that did not deliver it")


def close_on_loop(owner: object, loop: asyncio.AbstractEventLoop, close: Closer) -> weakref.finalize[Any, Any]:
    """Run ``close()`` on ``loop`` when ``owner`` is garbage-collected or at exit, unless detached first.

    For an async resource (a pool, a client) opened on the caller's loop and never closed: the
    finaliser runs it to completion when the loop is idle (exit after ``run_until_complete``), hands
    it to the loop when that runs on another thread, and schedules it when GC runs on the loop
    itself (finished at exit if the loop stopped first); a closed loop (``asyncio.run`` returned)
    has already cancelled the resource's tasks.
    ``close`` must not hold a reference to ``owner``. Detach the result in the owner's own close.
    """
    return weakref.finalize(owner, _run_close, loop, close)


_CLOSING: set[asyncio.Task[None]] = set()  # closes scheduled by a finaliser on its own loop


@atexit.register
def _finish_closing() -> None:
    """A close scheduled while its loop ran may not have run before the loop stopped: run it now."""
    for task in list(_CLOSING):
        loop = task.get_loop()
        if not task.done() and not loop.is_closed() and not loop.is_running():
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)


def _run_close(loop: asyncio.AbstractEventLoop, close: Closer) -> None:
    if loop.is_closed():
        return

    async def bounded() -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(close(), CLOSE_WAIT_S)

    running = _running_loop()
    with contextlib.suppress(Exception):
        if not loop.is_running():
            if running is None:  # another loop running here could not run this one
                loop.run_until_complete(bounded())
        elif running is loop:
            task = loop.create_task(bounded())
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)
        else:
            asyncio.run_coroutine_threadsafe(bounded(), loop).result(CLOSE_WAIT_S + 1)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
