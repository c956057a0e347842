"""Give a state facet written in one style the other face, without rewriting its logic.

``InlineAsync``: the async face of an in-process sync core whose calls never block for long
(memory). ``Portal``: the sync face of an async facet (PostgreSQL, Redis), running its coroutines
on one private event-loop thread (``EventLoopThread``, owned by the facet's ``Database``).
``InlineAsyncDocuments`` and ``DocumentsPortal`` are the same two for the documents facet.

``SyncState`` ends cleanly even when nobody closes it: a weakref finaliser (which also runs at
interpreter exit) closes the inner Database on the loop thread, then cancels what is left there
and stops the thread, each step bounded and quiet. An abandoned loop thread used to leave the
pool's worker tasks to be destroyed pending at exit ("Task was destroyed but it is pending!").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import weakref
from array import array
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from ..errors import StoreClosed
from ..search import Query
from . import forks
from .base import Database, DocumentsFacet, StateFacet, SyncDocumentsFacet, SyncStateFacet
from .documents import (
    DocumentHead,
    DocumentRecord,
    DocumentWrite,
    PathFilter,
    StoredDocument,
    StoredHit,
    StoredPassage,
    Unembedded,
)
from .ending import CLOSE_WAIT_S, cancel_the_rest
from .records import BatchOp, Entry, ListPage, StateRecord
from .remembered import Memo

T = TypeVar("T")


class InlineAsync(StateFacet):
    """Async face of a sync core, calling it on the event loop's thread."""

    def __init__(self, sync: SyncStateFacet) -> None:
        self.sync = sync

    async def get(self, ns: str, key: str) -> Entry | None:
        return self.sync.get(ns, key)

    async def write(self, op: BatchOp) -> Any:
        return self.sync.write(op)

    async def write_once(self, op: BatchOp, memo: Memo) -> Any:
        return self.sync.write_once(op, memo)

    async def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        return self.sync.keys(ns, prefix, after, limit)

    async def drop(self, ns: str) -> None:
        self.sync.drop(ns)

    async def records(self) -> AsyncIterator[StateRecord]:
        for record in self.sync.records():
            yield record

    async def restore(self, record: StateRecord) -> None:
        self.sync.restore(record)

    async def tail(self, ns: str, key: str, n: int) -> ListPage | None:
        return self.sync.tail(ns, key, n)

    async def items(self, ns: str, key: str, start: int, limit: int) -> ListPage | None:
        return self.sync.items(ns, key, start, limit)

    async def batch(self, ops: Sequence[BatchOp]) -> list[Any]:
        return self.sync.batch(ops)

    async def sweep(self, limit: int = 1000) -> int:
        return self.sync.sweep(limit)


class InlineAsyncDocuments(DocumentsFacet):
    """Async face of an in-process documents core, calling it on the event loop's thread."""

    def __init__(self, sync: SyncDocumentsFacet) -> None:
        self.sync = sync

    async def read(self, space: str, path: str) -> StoredDocument | None:
        return self.sync.read(space, path)

    async def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int:
        return self.sync.write(space, path, text, metadata, if_version, now)

    async def delete(self, space: str, path: str, if_version: int | None) -> bool:
        return self.sync.delete(space, path, if_version)

    async def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
        return self.sync.listing(space, where, after, limit)

    async def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
        return self.sync.search(space, query, where, limit)

    async def records(self) -> AsyncIterator[DocumentRecord]:
        for record in self.sync.records():
            yield record

    async def restore(self, record: DocumentRecord) -> None:
        self.sync.restore(record)

    async def nearest(
        self, space: str, key: str, vector: array[float], where: PathFilter, limit: int
    ) -> list[StoredHit]:
        return self.sync.nearest(space, key, vector, where, limit)

    async def write_embedded(self, written: DocumentWrite, key: str, passages: Sequence[StoredPassage]) -> int:
        return self.sync.write_embedded(written, key, passages)

    async def attach(self, space: str, path: str, version: int, key: str, passages: Sequence[StoredPassage]) -> bool:
        return self.sync.attach(space, path, version, key, passages)

    async def unembedded(
        self, key: str | None, space: str | None, after: tuple[str, str], limit: int
    ) -> list[Unembedded]:
        return self.sync.unembedded(key, space, after, limit)

    async def embedding_counts(self, key: str, space: str | None) -> tuple[int, int]:
        return self.sync.embedding_counts(key, space)


class EventLoopThread:
    """A private event loop on a daemon thread, for running coroutines from sync code.

    A call after ``stop()`` began, or one the stop cancelled, raises ``StoreClosed``: never a loop's
    own RuntimeError, and never a wait on a loop that will not run again. ``stop(first)`` may run on
    the loop's own thread too (a finaliser the collector ran there): it then runs ``first`` and ends
    the loop from inside instead of waiting for itself."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._stopping = False
        self.ending: concurrent.futures.Future[None] | None = None
        """The stop's ending, done once the loop's work ended (not when the bound gave up on it)."""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="keepstate-portal", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a portal call from its own loop thread would wait for itself")
        with self._lock:
            if self._stopping:
                coro.close()
                raise StoreClosed()
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.CancelledError:  # the stop cancelled it: the store closed under the call
            raise StoreClosed() from None

    def stop(self, first: Coroutine[Any, Any, None] | None = None) -> None:
        """Run ``first`` (a close), cancel and await what still runs on the loop (as ``asyncio.run``
        does), then end the loop and its thread; each step bounded, none raising. Again is a no-op."""
        with self._lock:
            if self._stopping:
                if first is not None:
                    first.close()
                return
            self._stopping = True
            self.ending = asyncio.run_coroutine_threadsafe(_end_loop(first), self.loop)
        if threading.current_thread() is not self._thread:
            with contextlib.suppress(Exception):  # a task deaf to cancellation: give up after the bound
                self.ending.result(2 * CLOSE_WAIT_S + 1)
            with contextlib.suppress(RuntimeError):  # closed already: the ending stopped it
                self.loop.call_soon_threadsafe(self.loop.stop)  # else the ending gave up: stop it now
            self._thread.join(timeout=CLOSE_WAIT_S)


async def _end_loop(first: Coroutine[Any, Any, None] | None) -> None:
    if first is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(first, CLOSE_WAIT_S)
    await cancel_the_rest()
    loop = asyncio.get_running_loop()
    loop.call_soon(loop.stop)  # after this task's done callbacks are queued: the waiting stop() hears of it


class Portal(SyncStateFacet):
    """Sync face of an async facet; the facet lives on its own loop thread."""

    def __init__(self, facet: StateFacet, loop: EventLoopThread) -> None:
        self.facet = facet
        self._loop = loop

    def get(self, ns: str, key: str) -> Entry | None:
        return self._loop.run(self.facet.get(ns, key))

    def write(self, op: BatchOp) -> Any:
        return self._loop.run(self.facet.write(op))

    def write_once(self, op: BatchOp, memo: Memo) -> Any:
        return self._loop.run(self.facet.write_once(op, memo))

    def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        return self._loop.run(self.facet.keys(ns, prefix, after, limit))

    def drop(self, ns: str) -> None:
        self._loop.run(self.facet.drop(ns))

    def records(self) -> Iterator[StateRecord]:
        async def collect() -> list[StateRecord]:
            return [record async for record in self.facet.records()]

        yield from self._loop.run(collect())

    def restore(self, record: StateRecord) -> None:
        self._loop.run(self.facet.restore(record))

    def tail(self, ns: str, key: str, n: int) -> ListPage | None:
        return self._loop.run(self.facet.tail(ns, key, n))

    def items(self, ns: str, key: str, start: int, limit: int) -> ListPage | None:
        return self._loop.run(self.facet.items(ns, key, start, limit))

    def batch(self, ops: Sequence[BatchOp]) -> list[Any]:
        return self._loop.run(self.facet.batch(ops))

    def sweep(self, limit: int = 1000) -> int:
        return self._loop.run(self.facet.sweep(limit))


class DocumentsPortal:
    """Sync face of an async documents facet; the facet lives on its own loop thread."""

    def __init__(self, facet: DocumentsFacet, loop: EventLoopThread) -> None:
        self.facet = facet
        self._loop = loop

    def read(self, space: str, path: str) -> StoredDocument | None:
        return self._loop.run(self.facet.read(space, path))

    def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int:
        return self._loop.run(self.facet.write(space, path, text, metadata, if_version, now))

    def delete(self, space: str, path: str, if_version: int | None) -> bool:
        return self._loop.run(self.facet.delete(space, path, if_version))

    def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
        return self._loop.run(self.facet.listing(space, where, after, limit))

    def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
        return self._loop.run(self.facet.search(space, query, where, limit))

    def records(self) -> Iterator[DocumentRecord]:
        """Read whole before the first is given: export streams through the async face instead."""
        return iter(self._loop.run(_collected(self.facet.records())))

    def restore(self, record: DocumentRecord) -> None:
        self._loop.run(self.facet.restore(record))

    def nearest(self, space: str, key: str, vector: array[float], where: PathFilter, limit: int) -> list[StoredHit]:
        return self._loop.run(self.facet.nearest(space, key, vector, where, limit))

    def write_embedded(self, written: DocumentWrite, key: str, passages: Sequence[StoredPassage]) -> int:
        return self._loop.run(self.facet.write_embedded(written, key, passages))

    def attach(self, space: str, path: str, version: int, key: str, passages: Sequence[StoredPassage]) -> bool:
        return self._loop.run(self.facet.attach(space, path, version, key, passages))

    def unembedded(self, key: str | None, space: str | None, after: tuple[str, str], limit: int) -> list[Unembedded]:
        return self._loop.run(self.facet.unembedded(key, space, after, limit))

    def embedding_counts(self, key: str, space: str | None) -> tuple[int, int]:
        return self._loop.run(self.facet.embedding_counts(key, space))


async def _collected(records: AsyncIterator[DocumentRecord]) -> list[DocumentRecord]:
    return [record async for record in records]


class SyncState:
    """A network Database's sync faces: an inner Database of the same URL, opened on a private loop
    thread on first use, its state facet behind a ``Portal`` and its documents behind a
    ``DocumentsPortal``. ``close()`` (again is a no-op), garbage collection or interpreter exit
    closes both. A forked child forgets the parent's (``forks``) and opens its own on first use.

    What a ``Portal`` needs lives as long as this object: hold it (its ``Database``, the ``Store``)
    for as long as the faces it gave are used."""

    def __init__(self, opener: Callable[[], Database]) -> None:
        self._opener = opener
        self._opened: tuple[EventLoopThread, Database] | None = None
        self._portal: Portal | None = None
        self._documents: DocumentsPortal | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._lock = threading.Lock()
        forks.forget_in_child(self, SyncState._forget)

    def face(self) -> Portal:
        portal = self._portal  # the hot path: no lock once made
        if portal is not None:
            return portal
        with self._lock:
            if self._portal is None:
                loop, inner = self._open()
                self._portal = Portal(self._first(loop, inner.state()), loop)
            return self._portal

    def documents(self) -> DocumentsPortal:
        with self._lock:
            if self._documents is None:
                loop, inner = self._open()
                self._documents = DocumentsPortal(self._first(loop, inner.documents()), loop)
            return self._documents

    def _open(self) -> tuple[EventLoopThread, Database]:
        """The loop thread and the inner Database, made on the first call (under the lock)."""
        if self._opened is None:
            loop, inner = EventLoopThread(), self._opener()
            self._opened = loop, inner
            self._finalizer = weakref.finalize(self, _close_quietly, loop, inner)
        return self._opened

    def _first(self, loop: EventLoopThread, facet: Coroutine[Any, Any, T]) -> T:
        """A facet of the inner Database; when even the first one fails, the loop and Database go."""
        try:
            return loop.run(facet)
        except BaseException:
            if self._portal is None and self._documents is None:
                self._close_unlocked()
            raise

    def close(self) -> None:
        with self._lock:
            self._close_unlocked()

    def _close_unlocked(self) -> None:
        finalizer, self._finalizer = self._finalizer, None
        self._opened = self._portal = self._documents = None
        found = None if finalizer is None else finalizer.detach()
        if found is not None:
            _close(*found[2])

    def _forget(self) -> None:
        """In a forked child: the parent's loop thread is not here and its connections are not ours."""
        if self._opened is not None:
            forks.abandon_loop(self._opened[0].loop)
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = self._opened = self._portal = self._documents = None
        self._lock = threading.Lock()


def _close(loop: EventLoopThread, inner: Database) -> None:
    loop.stop(inner.aclose())


def _close_quietly(loop: EventLoopThread, inner: Database) -> None:
    """The finaliser: at exit or on GC nobody can handle an error, so none is raised or printed."""
    with contextlib.suppress(Exception):
        _close(loop, inner)
