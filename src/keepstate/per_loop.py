"""One resource per event loop, for resources that belong to the loop that made them.

PostgreSQL's async pool, Redis's asyncio client and httpx's async connections are bound to their
first loop. Code that runs each call under a new loop (``asyncio.run`` per call, as sync wrappers
do), or uses one object from several loops at once, needs one per loop. ``PerLoop`` hands out the
running loop's, made on first use, and closes it when that loop shuts down, at ``aclose_current()``
from it, or at ``close()`` of the whole (each on its own loop); after ``close()`` every call raises
``StoreClosed``. A forked child abandons the parent's loops (``stores.forks``) and makes its own.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from .errors import StoreClosed
from .stores import forks, open_database
from .stores.base import Database
from .stores.ending import close_at_loop_shutdown, close_on

T = TypeVar("T")


class PerLoop(Generic[T]):
    """The resource of each event loop; ``everywhere``, when given, is the one of every loop (a
    resource not bound to a loop), never closed here."""

    def __init__(
        self, make: Callable[[], T], aclose: Callable[[T], Awaitable[None]], everywhere: T | None = None
    ) -> None:
        self._make = make
        self._aclose = aclose
        self._everywhere = everywhere
        self.closed = False
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Held[T]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        forks.forget_in_child(self, PerLoop._forget)

    async def current(self) -> T:
        """The running loop's resource; ``StoreClosed`` after ``close()``."""
        if self.closed:
            raise StoreClosed()
        if self._everywhere is not None:
            return self._everywhere
        loop = asyncio.get_running_loop()
        held = self._loops.get(loop)
        if held is None:
            held = await self._open(loop)
        return held.resource

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Held[T]:
        resource = self._make()
        mine = _Held(resource, await close_at_loop_shutdown(lambda: self._aclose(resource)))
        with self._lock:
            closed = self.closed
            held = mine if closed else self._loops.setdefault(loop, mine)
        if closed or held is not mine:  # closed meanwhile, or another task of this loop was first
            mine.disarm()
            await self._aclose(resource)
            if closed:
                raise StoreClosed()
        return held

    async def aclose_current(self) -> None:
        """Close the running loop's resource now (the other loops' stay)."""
        with self._lock:
            held = self._loops.pop(asyncio.get_running_loop(), None)
        if held is not None:
            held.disarm()
            await self._aclose(held.resource)

    def close(self) -> None:
        """Close every loop's resource, each on its own loop (``ending.close_on``); again is a no-op."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            loops, self._loops = dict(self._loops), weakref.WeakKeyDictionary()
        for loop, held in loops.items():
            held.disarm()
            close_on(loop, _closer(self._aclose, held.resource))

    def _forget(self) -> None:
        """In a forked child: every loop's resources are the parent's."""
        for loop in list(self._loops):
            forks.abandon_loop(loop)
        self._loops = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()


class _Held(Generic[T]):
    __slots__ = ("disarm", "resource")

    def __init__(self, resource: T, disarm: Callable[[], None]) -> None:
        self.resource = resource
        self.disarm = disarm


def _closer(aclose: Callable[[Any], Awaitable[None]], resource: Any) -> Callable[[], Awaitable[None]]:
    return lambda: aclose(resource)


def per_loop_databases(database: Database) -> PerLoop[Database]:
    """The Database of each loop for the store of ``database``: a new one of its URL per loop when its
    async connections are bound to a loop (``Database.loop_bound``), else ``database`` itself."""
    url = database.url
    return PerLoop(lambda: open_database(url), _aclose_database, None if database.loop_bound else database)


async def _aclose_database(database: Database) -> None:
    await database.aclose()  # not ``Database.aclose``: that is the contract's, not the backend's
