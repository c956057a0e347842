"""``memory://`` and ``memory://NAME``: a store in this process, for tests and one-process apps.

One meaning everywhere: ``memory://NAME`` is the process's memory space named NAME — its state, its
platform records, its session leases, its harness tables and its agents' documents — shared by every opener of that URL
(any thread, any event loop) for as long as the process lives. A bare ``memory://`` is a fresh,
private space for each ``open_database`` call. Nothing is shared with other processes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ..base import (
    Capabilities,
    Database,
    DocumentsFacet,
    HarnessFacet,
    LeaseFacet,
    PlatformFacet,
    StateFacet,
    SyncDocumentsFacet,
    SyncStateFacet,
)
from ..faces import InlineAsync, InlineAsyncDocuments
from ..records import StoredSession, namespace
from ..remembered import IN_FLIGHT_S, Memo, Remembered, in_flight
from ..session_forks import Cuts, copies, cuts_of
from ..sql.harness_facet import SqlHarness
from .documents import MemoryDocuments
from .harness import MemoryEngine, MemorySqlite
from .leases import LeaseSpace, MemoryLeases
from .platform import MemoryPlatform
from .state import MemoryState

OWN_BACKUP = "a memory:// store lives in one process and has nothing to back up"
"""How this store is backed up: it has no file backup (``keepstate backup``)."""
T = TypeVar("T")
CAPABILITIES = Capabilities(
    shared=False, platform=True, leases=True, harness=True, documents=True, own_backup=OWN_BACKUP
)


@dataclass
class MemorySpace:
    """Everything one memory store holds."""

    state: MemoryState = field(default_factory=MemoryState)
    platform: MemoryPlatform = field(default_factory=MemoryPlatform)
    leases: dict[str, LeaseSpace] = field(default_factory=dict)
    harness: MemorySqlite = field(default_factory=MemorySqlite)
    documents: MemoryDocuments = field(default_factory=MemoryDocuments)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def lease_space(self, space: str) -> LeaseSpace:
        with self.lock:
            return self.leases.setdefault(space, LeaseSpace())


_NAMED: dict[str, MemorySpace] = {}
_NAMED_LOCK = threading.Lock()


def space_name(url: str) -> str:
    """``memory://NAME`` → NAME (empty for a private space)."""
    if not url.startswith("memory://"):
        raise ValueError(f"not a memory store URL: {url!r}")
    return url[len("memory://") :].split("?", 1)[0]


def _space(name: str) -> MemorySpace:
    if not name:
        return MemorySpace()
    with _NAMED_LOCK:
        return _NAMED.setdefault(name, MemorySpace())


class MemoryDatabase(Database):
    capabilities = CAPABILITIES

    def __init__(self, url: str) -> None:
        self.url = url
        self.space = _space(space_name(url))
        self._async_state = InlineAsync(self.space.state)
        self._async_documents = InlineAsyncDocuments(self.space.documents)

    async def state(self) -> StateFacet:
        return self._async_state

    def sync_state(self) -> SyncStateFacet:
        return self.space.state

    async def platform(self) -> PlatformFacet:
        return self.space.platform

    remembers_sync = True

    def remember_sync(self, memo: Memo, work: Callable[[], T]) -> T | Remembered:
        """The platform's ``remember`` run to its end on this thread: it awaits nothing but a first write
        of the key still in flight, which is waited for here."""

        async def step() -> T:
            return work()

        deadline = time.monotonic() + IN_FLIGHT_S
        while True:
            attempt = self.space.platform.remember(memo, step)
            try:
                attempt.send(None)
            except StopIteration as done:
                result: T | Remembered = done.value
                return result
            attempt.close()  # it waits for the key's first write, before doing anything: wait here instead
            if time.monotonic() > deadline:
                raise in_flight(memo.key)
            time.sleep(0.01)

    async def documents(self) -> DocumentsFacet:
        return self._async_documents

    def sync_documents(self) -> SyncDocumentsFacet:
        return self.space.documents

    async def leases(self, space: str) -> LeaseFacet:
        return MemoryLeases(self.space.lease_space(space))

    def harness(self, prefix: str, chunk_size: int) -> HarnessFacet:
        return SqlHarness(MemoryEngine(self.space.harness), prefix, chunk_size)

    async def delete_session(self, env: str, session_id: str, now: int) -> list[str] | None:
        """Atomic by construction: nothing awaits between the platform's step and the state's."""
        agents = self.space.platform.delete_session(env, session_id, now)
        for agent in agents or ():
            self.space.state.drop(namespace(env, "session", agent, session_id))
        return agents

    async def fork_session(
        self, source: StoredSession, fork: StoredSession, cuts: Cuts
    ) -> tuple[StoredSession, bool] | None:
        """Under the state's lock, so no write lands midway; the lists are checked before anything is made."""
        state = self.space.state
        with state.lock:
            for (agent, key), keep in cuts.items():
                state.items(namespace(source.env, "session", agent, source.id), key, 0, keep)
            forked = self.space.platform.fork_session(source, fork)
            if forked is None or not forked.created:
                return None if forked is None else (forked.session, False)
            for copied, target in copies(source, forked):
                state.copy(copied, target)
            for ns, key, keep in cuts_of(forked.session, cuts):
                state.keep_first(ns, key, keep)
        return forked.session, True

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def close(self) -> None:
        return None
