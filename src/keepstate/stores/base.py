"""The storage contract every backend implements, and its record types.

A backend stores *entries*: canonical JSON bytes under ``(namespace, key)``, each with a version.
Namespaces are opaque strings built by ``namespace()``; keys are already checked by
``keepstate.values``; values arrive already encoded and size-checked (``values.encode``), so a
backend never parses JSON except to convert a stored list for its first append.

Two faces of one contract, with no hand-kept twins of the logic behind them:
``Backend`` (async) is what the server, the platform and the session store use;
``SyncBackend`` is what the embedded ``keepstate.open()`` uses. In-process backends (memory,
SQLite) are written sync and get their async face by adapter; network backends (PostgreSQL,
Redis) are written async and get their sync face through a portal thread (``stores.portal``).

Rules every backend keeps (the conformance suite checks each one):
- versions start at 1 and grow by one per write (put or append) and never repeat for a key, also
  after a delete: a delete leaves a tombstone holding the last version;
- ``if_version`` 0 means "only if absent"; a mismatch raises VersionConflict(current_version);
- append is atomic, creates the list if needed, raises NotAList / TooLarge (1 MiB for the whole
  list, nothing added), and does not rewrite the existing list;
- every operation on one key is linearizable, also across processes sharing the store;
- driver errors are translated to ``keepstate.Unavailable`` at the backend boundary.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

SCOPE_KINDS = ("run", "session", "agent", "user")


def namespace(env: str, kind: str, agent: str, id: str = "") -> str:
    """The namespace of one scope; every part is key-charset, so ``/`` cannot collide."""
    return f"{env}/{kind}/{agent}/{id}"


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored value: canonical JSON bytes and its version."""

    data: bytes
    version: int


@dataclass(frozen=True, slots=True)
class StateRecord:
    """One key as export/import moves it; ``data`` is None for a tombstone (deleted key)."""

    ns: str
    key: str
    version: int
    data: bytes | None


class SyncBackend(Protocol):
    """The contract, synchronous face."""

    def get(self, ns: str, key: str) -> Entry | None:
        """The live entry, or None when absent or deleted."""

    def put(self, ns: str, key: str, data: bytes, if_version: int | None = None) -> int:
        """Write ``data``; return the new version. VersionConflict on an ``if_version`` mismatch."""

    def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        """Delete; True when a live value was deleted. VersionConflict on a mismatch."""

    def append(self, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]:
        """Append encoded items atomically; return ``(version, length)``."""

    def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        """Live keys in key order, ``> after`` and starting with ``prefix``, at most ``limit``."""

    def drop(self, ns: str) -> None:
        """Delete every key of a namespace (keeping tombstones, so versions never repeat)."""

    def records(self) -> Iterator[StateRecord]:
        """Every key of the store, tombstones included, for export."""

    def restore(self, record: StateRecord) -> None:
        """Write a record exactly as exported (its version included), for import."""

    def ping(self) -> None:
        """Raise Unavailable when the store cannot be reached."""

    def close(self) -> None: ...


class Backend(ABC):
    """The contract, asynchronous face (same methods and promises as ``SyncBackend``)."""

    @abstractmethod
    async def get(self, ns: str, key: str) -> Entry | None: ...

    @abstractmethod
    async def put(self, ns: str, key: str, data: bytes, if_version: int | None = None) -> int: ...

    @abstractmethod
    async def delete(self, ns: str, key: str, if_version: int | None = None) -> bool: ...

    @abstractmethod
    async def append(self, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]: ...

    @abstractmethod
    async def keys(
        self, ns: str, prefix: str = "", after: str = "", limit: int = 100
    ) -> list[tuple[str, int]]: ...

    @abstractmethod
    async def drop(self, ns: str) -> None: ...

    @abstractmethod
    def records(self) -> AsyncIterator[StateRecord]: ...

    @abstractmethod
    async def restore(self, record: StateRecord) -> None: ...

    @abstractmethod
    async def ping(self) -> None: ...

    @abstractmethod
    async def aclose(self) -> None: ...


def prefix_end(prefix: str) -> str:
    """The smallest string above every key that starts with ``prefix`` (keys are ASCII)."""
    return prefix + "\x7f"
