"""The lease facet in memory: dictionaries behind one lock, for tests and one-process apps.

Each primitive runs under a ``threading.Lock`` and never awaits while holding it, so every step is
atomic from any thread or event loop of the process. Not shared between processes: use SQLite,
PostgreSQL or Redis for that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from ..base import LeaseFacet
from ..records import Blob, BlobRecord


@dataclass
class LeaseSpace:
    """The leases and blobs of one space (``sessions`` or ``tokens``) of one memory store."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    blobs: dict[str, Blob] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)
    leases: dict[str, tuple[int, float]] = field(default_factory=dict)  # id -> (token, monotonic expiry)


class MemoryLeases(LeaseFacet):
    poll_first = 0.002
    poll_max = 0.05

    def __init__(self, space: LeaseSpace) -> None:
        self._s = space

    async def acquire(self, id: str, ttl_ms: int) -> int | None:
        now = time.monotonic()
        with self._s.lock:
            held = self._s.leases.get(id)
            if held is not None and held[1] > now:
                return None
            token = self._s.fences.get(id, 0) + 1
            self._s.fences[id] = token
            self._s.leases[id] = (token, now + ttl_ms / 1000)
            return token

    async def renew(self, id: str, token: int, ttl_ms: int) -> bool:
        with self._s.lock:
            if self._s.fences.get(id) != token:
                return False
            self._s.leases[id] = (token, time.monotonic() + ttl_ms / 1000)
            return True

    async def release(self, id: str, token: int) -> None:
        with self._s.lock:
            held = self._s.leases.get(id)
            if held is not None and held[0] == token:
                del self._s.leases[id]

    async def read(self, id: str) -> Blob | None:
        with self._s.lock:
            return self._s.blobs.get(id)

    async def write(self, id: str, stored: Blob, token: int | None) -> int | None:
        with self._s.lock:
            if not self._current(id, token):
                return None
            old = self._s.blobs.get(id)
            version = 1 if old is None else old.version + 1
            self._s.blobs[id] = replace(stored, version=version)
            return version

    async def remove(self, id: str, token: int | None) -> bool:
        with self._s.lock:
            if not self._current(id, token):
                return False
            self._s.blobs.pop(id, None)
            return True

    async def touch(self, id: str, expires_at: int, token: int | None) -> bool:
        with self._s.lock:
            if not self._current(id, token):
                return False
            old = self._s.blobs.get(id)
            if old is not None:
                self._s.blobs[id] = replace(old, expires_at=expires_at)
            return True

    async def records(self) -> AsyncIterator[BlobRecord]:
        with self._s.lock:
            found = sorted(self._s.blobs.items())
        for id, blob in found:
            yield BlobRecord(id, blob)

    async def restore(self, record: BlobRecord) -> None:
        with self._s.lock:
            self._s.blobs[record.id] = record.blob

    async def purge(self, before: int, limit: int) -> int:
        """Expired blobs only: the fencing counters stay (they are what keeps tokens growing here)."""
        with self._s.lock:
            gone = self._purgeable(before)[:limit]
            for id in gone:
                del self._s.blobs[id]
            return len(gone)

    async def count_purgeable(self, before: int) -> int:
        with self._s.lock:
            return len(self._purgeable(before))

    def _purgeable(self, before: int) -> list[str]:
        blobs = self._s.blobs.items()
        return [id for id, blob in blobs if not blob.pinned and (blob.expires_at or before) < before]

    def _current(self, id: str, token: int | None) -> bool:
        return token is None or self._s.fences.get(id) == token
