"""Ending async work cleanly: cancellations a driver lost are raised, and what a user forgot is closed.

Two ways a process failed to end. On Python 3.11 ``asyncio.wait_for`` (psycopg_pool's connection
wait, redis-py's send) loses a cancellation that lands in the loop step its inner work completes
(CPython gh-86296): the call returns normally and the task goes on as if never cancelled — a lease
renewer so cancelled renewed forever. And a pool left open keeps worker tasks on its loop that, at
interpreter exit, are destroyed pending ("Task was destroyed but it is pending!"). The drivers'
wrappers (``postgres.db.aconnection``, ``redis.db.translate_errors``) use ``raise_lost_cancel``;
what opens a pool on the caller's loop registers ``close_on_loop``; the sync faces' loop thread
closes itself the same way (``faces``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

Closer = Callable[[], Awaitable[None]]
CLOSE_WAIT_S = 5.0
"""Longest a close waits for a resource, then for the tasks left on a loop: exit never hangs on it."""


def cancel_requests() -> int:
    """How many cancellations of the current task are pending (``Task.cancelling()``; 0 off a task)."""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def raise_lost_cancel(before: int) -> None:
    """Raise the cancellation a driver swallowed since ``before = cancel_requests()``.

    ``cancelling()`` still counts a request the driver swallowed (only ``uncancel()``, as
    ``asyncio.timeout`` uses, takes one back), so a rise means the task was cancelled and goes on.
    """
    if cancel_requests() > before:
        raise asyncio.CancelledError("cancelled during a driver call that did not deliver it")


def close_on_loop(owner: object, loop: asyncio.AbstractEventLoop, close: Closer) -> weakref.finalize[Any, Any]:
    """Run ``close()`` on ``loop`` when ``owner`` is garbage-collected or at exit, unless detached first.

    For an async resource (a pool) opened on the caller's loop and never closed: the finaliser runs
    it to completion when the loop is idle (exit after ``run_until_complete``), hands it to the loop
    when that runs on another thread, and schedules it when GC runs on the loop itself (finished at
    exit if the loop stopped first); a closed loop (``asyncio.run`` returned) has already cancelled
    the resource's tasks. ``close`` must not hold a reference to ``owner``; bounded, never raises.
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


def close_on(loop: asyncio.AbstractEventLoop, close: Closer) -> None:
    """Run ``close()`` on ``loop`` now or as soon as it can (``close_on_loop``'s ways, bounded, never
    raising): for a resource of another loop that its owner ends explicitly."""
    _run_close(loop, close)


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


async def cancel_the_rest() -> None:
    """Cancel every other task of the running loop and wait for them, bounded (as ``asyncio.run`` does)."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    for task in others:
        task.cancel()
    if others:
        done, _ = await asyncio.wait(others, timeout=CLOSE_WAIT_S)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: a task that failed while closing has nothing left to say
    await asyncio.get_running_loop().shutdown_asyncgens()


async def close_at_loop_shutdown(close: Closer) -> Callable[[], None]:
    """Run ``close()`` when the running loop shuts down (``asyncio.run``, ``asyncio.Runner`` and
    pytest-asyncio end a loop with ``shutdown_asyncgens``, which finalises every async generator
    begun on it); returns a function that drops the hook. For a per-loop resource its user may never
    close: the loop then ends without leaving an unclosed socket behind."""
    armed = True

    async def hook() -> AsyncIterator[None]:
        try:
            yield
        finally:
            _HOOKS.discard(generator)
            if armed:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(close(), CLOSE_WAIT_S)

    def disarm() -> None:
        nonlocal armed
        armed = False
        _HOOKS.discard(generator)

    generator = hook()
    _HOOKS.add(generator)
    await generator.__anext__()  # begun on this loop: the loop now finalises it at shutdown
    return disarm


_HOOKS: set[AsyncIterator[None]] = set()
"""Begun hooks (a loop holds its async generators weakly): kept until their loop finalises them."""
