"""The state facet in memory: the contract in a dict, for tests and one-process apps.

It is the reference the conformance suite holds every other backend to. Lists keep their items
as encoded bytes, so an append costs the items appended, not the list.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ...errors import NotAList, VersionConflict
from ..lists import appended_size, check_append, join_items, split_list
from ..records import Entry, StateRecord


@dataclass(slots=True)
class _Slot:
    version: int
    data: bytes | None = None  # a plain value
    items: list[bytes] | None = None  # a list built by append
    size: int = 0

    @property
    def live(self) -> bool:
        return self.data is not None or self.items is not None


@dataclass
class MemoryState:
    """The whole store behind one lock: every operation is trivially linearizable."""

    slots: dict[tuple[str, str], _Slot] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, ns: str, key: str) -> Entry | None:
        with self.lock:
            slot = self.slots.get((ns, key))
            if slot is None or not slot.live:
                return None
            return Entry(_value_of(slot), slot.version)

    def put(self, ns: str, key: str, data: bytes, if_version: int | None = None) -> int:
        with self.lock:
            slot = self._checked(ns, key, if_version)
            slot.version += 1
            slot.data, slot.items, slot.size = data, None, len(data)
            return slot.version

    def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        with self.lock:
            slot = self._checked(ns, key, if_version)
            was_live = slot.live
            slot.data, slot.items, slot.size = None, None, 0
            return was_live

    def append(self, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]:
        with self.lock:
            slot = self.slots.setdefault((ns, key), _Slot(0))
            if slot.data is not None:
                if not slot.data.startswith(b"["):
                    raise NotAList(f"{key!r} holds a value that is not a list")
                slot.items, slot.data = split_list(slot.data), None
            current = slot.items if slot.items is not None else []
            size = appended_size(slot.size, len(current), [len(item) for item in items])
            check_append(size)
            current.extend(items)
            slot.items = current
            slot.version += 1
            slot.size = size
            return slot.version, len(slot.items)

    def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        with self.lock:
            found = sorted(
                (key, slot.version)
                for (slot_ns, key), slot in self.slots.items()
                if slot_ns == ns and slot.live and key > after and key.startswith(prefix)
            )
        return found[:limit]

    def drop(self, ns: str) -> None:
        with self.lock:
            for (slot_ns, _), slot in self.slots.items():
                if slot_ns == ns:
                    slot.data, slot.items, slot.size = None, None, 0

    def records(self) -> Iterator[StateRecord]:
        with self.lock:
            snapshot = [
                StateRecord(ns, key, slot.version, _value_of(slot) if slot.live else None)
                for (ns, key), slot in sorted(self.slots.items())
            ]
        yield from snapshot

    def restore(self, record: StateRecord) -> None:
        with self.lock:
            size = len(record.data) if record.data is not None else 0
            self.slots[(record.ns, record.key)] = _Slot(record.version, record.data, None, size)

    def _checked(self, ns: str, key: str, if_version: int | None) -> _Slot:
        slot = self.slots.setdefault((ns, key), _Slot(0))
        current = slot.version if slot.live else 0
        if if_version is not None and if_version != current:
            raise VersionConflict(current_version=current)
        return slot


def _value_of(slot: _Slot) -> bytes:
    return slot.data if slot.data is not None else join_items(slot.items or [])
