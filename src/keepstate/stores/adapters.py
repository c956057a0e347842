"""Give a backend written in one style the other face, without rewriting its logic.

``InlineAsync``: the async face of an in-process sync backend whose calls never block for long
(memory). ``Portal``: the sync face of an async backend (PostgreSQL, Redis), running its
coroutines on one private event-loop thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from .base import Backend, Entry, StateRecord, SyncBackend

T = TypeVar("T")


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

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()


class Portal:
    """Sync face of an async backend; the backend lives on its own loop thread."""

    def __init__(self, backend: Backend, loop: EventLoopThread) -> None:
        self.backend = backend
        self._loop = loop

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
        try:
            self._loop.run(self.backend.aclose())
        finally:
            self._loop.stop()
