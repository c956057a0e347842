"""``memory://`` and ``memory://NAME``: a store in this process, for tests and one-process apps.

One meaning everywhere: ``memory://NAME`` is the process's memory space named NAME — its state, its
platform records, its session leases, its harness tables and its agents' documents — shared by every opener of that URL
(any thread, any event loop) for as long as the process lives. A bare ``memory://`` is a fresh,
private space for each ``open_database`` call. Nothing is shared with other processes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

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
from ..records import namespace
from ..sql.harness_facet import SqlHarness
from .documents import MemoryDocuments
from .harness import MemoryEngine, MemorySqlite
from .leases import LeaseSpace, MemoryLeases
from .platform import MemoryPlatform
from .state import MemoryState

CAPABILITIES = Capabilities(shared=False, platform=True, leases=True, harness=True, documents=True)


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
    return url[len("memory://"):].split("?", 1)[0]


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

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def close(self) -> None:
        return None

