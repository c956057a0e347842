"""The state facet in memory: the contract in a dict, for tests and one-process apps.

It is the reference the conformance suite holds every other backend to. Lists keep their items as
encoded bytes, so an append costs the items appended and a part of a list costs that part, never
the list. Expiry is judged at every call against the clock (``expires_at`` ms), so an expired slot
reads as absent the moment it expires; ``sweep`` only frees its value. One lock makes every call,
and a whole batch, atomic.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...clock import now_ms
from ...errors import NotAList, VersionConflict
from ...values import MAX_VERSION, list_size
from ..base import SyncStateFacet
from ..batches import Gathered
from ..lists import appended_size, check_append, join_items, split_list
from ..numbers import add_checked, integer_of
from ..records import BatchOp, Entry, ListPage, Patcher, StateRecord, unknown_write, version_limit


@dataclass(slots=True)
class _Slot:
    version: int
    data: bytes | None = None  # a plain value
    items: list[bytes] | None = None  # a list built by append
    size: int = 0
    expires_at: int | None = None

    def live(self, now: int) -> bool:
        alive = self.data is not None or self.items is not None
        return alive and (self.expires_at is None or self.expires_at > now)

    def clear(self) -> None:
        self.data, self.items, self.size, self.expires_at = None, None, 0, None


def _expiry(ttl_ms: int | None, keep: int | None, now: int) -> int | None:
    """A write's expiry: ``ttl_ms`` from now, else the key's own (``keep``)."""
    return keep if ttl_ms is None else now + ttl_ms


@dataclass
class MemoryState(SyncStateFacet):
    """The whole store behind one lock: every operation is trivially linearizable."""

    slots: dict[tuple[str, str], _Slot] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def write(self, op: BatchOp) -> Any:
        if op.op == "put":  # the commonest, without the table's extra call
            return self._put(op.ns, op.key, op.data, op.if_version, op.ttl_ms)
        run = _APPLY.get(op.op)
        if run is None:
            raise unknown_write(op)
        return run(self, op)

    def get(self, ns: str, key: str) -> Entry | None:
        with self.lock:
            slot = self.slots.get((ns, key))
            if slot is None or not slot.live(now_ms()):
                return None
            return Entry(_value_of(slot), slot.version, slot.expires_at)

    def _put(self, ns: str, key: str, data: bytes, if_version: int | None, ttl_ms: int | None) -> int:
        with self.lock:
            now = now_ms()
            slot = _room(self._checked(ns, key, if_version, now))
            slot.version += 1
            slot.data, slot.items, slot.size = data, None, len(data)
            slot.expires_at = None if ttl_ms is None else now + ttl_ms
            return slot.version

    def _delete(self, ns: str, key: str, if_version: int | None) -> bool:
        with self.lock:
            now = now_ms()
            slot = self._checked(ns, key, if_version, now)
            was_live = slot.live(now)
            slot.clear()
            return was_live

    def _append(self, ns: str, key: str, items: Sequence[bytes], ttl_ms: int | None) -> tuple[int, int]:
        with self.lock:
            now = now_ms()
            slot = _room(self._list(ns, key, now))
            current = slot.items if slot.items is not None else []
            size = appended_size(slot.size, len(current), [len(item) for item in items])
            check_append(size)
            current.extend(items)
            slot.items, slot.size = current, size
            slot.version += 1
            slot.expires_at = _expiry(ttl_ms, slot.expires_at, now)
            return slot.version, len(current)

    def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        with self.lock:
            now = now_ms()
            found = sorted(
                (key, slot.version)
                for (slot_ns, key), slot in self.slots.items()
                if slot_ns == ns and slot.live(now) and key > after and key.startswith(prefix)
            )
        return found[:limit]

    def drop(self, ns: str) -> None:
        with self.lock:
            for (slot_ns, _), slot in self.slots.items():
                if slot_ns == ns:
                    slot.clear()

    def copy(self, source: str, target: str) -> None:
        """Make namespace ``target`` hold ``source``'s live keys — values, items, versions, expiries — and
        nothing else, its own versions kept growing (a step of ``MemoryDatabase.fork_session``)."""
        with self.lock:
            now = now_ms()
            self.drop(target)
            for (ns, key), slot in list(self.slots.items()):
                if ns == source and slot.live(now):
                    old = self.slots.get((target, key))
                    version = slot.version if old is None else max(slot.version, old.version + 1)
                    items = None if slot.items is None else list(slot.items)
                    self.slots[(target, key)] = _Slot(version, slot.data, items, slot.size, slot.expires_at)

    def keep_first(self, ns: str, key: str, n: int) -> None:
        """Cut a list to its first ``n`` items, stored whole (a write; its expiry kept); an absent key
        stays absent; NotAList for another value (a step of ``MemoryDatabase.fork_session``)."""
        with self.lock:
            kept = self.items(ns, key, 0, n)
            if kept is not None:
                slot = _room(self.slots[(ns, key)])
                slot.data, slot.items = join_items(kept.items), None
                slot.size, slot.version = len(slot.data), slot.version + 1

    def records(self) -> Iterator[StateRecord]:
        with self.lock:
            now = now_ms()
            snapshot = [
                StateRecord(
                    ns,
                    key,
                    slot.version,
                    _value_of(slot) if slot.live(now) else None,
                    slot.expires_at if slot.live(now) else None,
                )
                for (ns, key), slot in sorted(self.slots.items())
            ]
        yield from snapshot

    def restore(self, record: StateRecord) -> None:
        with self.lock:
            size = len(record.data) if record.data is not None else 0
            expires = record.expires_at if record.data is not None else None
            self.slots[(record.ns, record.key)] = _Slot(record.version, record.data, None, size, expires)

    def tail(self, ns: str, key: str, n: int) -> ListPage | None:
        return self._part(ns, key, lambda items: items[-n:] if n > 0 else [])

    def items(self, ns: str, key: str, start: int, limit: int) -> ListPage | None:
        return self._part(ns, key, lambda items: items[start : start + limit])

    def _trim(self, ns: str, key: str, keep_last: int, if_version: int | None, ttl_ms: int | None) -> tuple[int, int]:
        with self.lock:
            now = now_ms()
            slot = self._checked(ns, key, if_version, now)
            if not slot.live(now):
                return 0, 0
            slot = _room(self._list(ns, key, now))
            items = slot.items or []
            kept = items[len(items) - keep_last :] if keep_last < len(items) else items
            slot.items, slot.size = kept, _list_size(kept)
            slot.version += 1
            slot.expires_at = _expiry(ttl_ms, slot.expires_at, now)
            return slot.version, len(kept)

    def _pop(self, ns: str, key: str, if_version: int | None) -> tuple[bytes, int, int] | None:
        with self.lock:
            now = now_ms()
            slot = self._checked(ns, key, if_version, now)
            if not slot.live(now):
                return None
            slot = self._list(ns, key, now)
            if not slot.items:
                return None
            _room(slot)
            item = slot.items.pop()
            slot.size = _list_size(slot.items)
            slot.version += 1
            return item, slot.version, len(slot.items)

    def _incr(self, ns: str, key: str, by: int, if_version: int | None, ttl_ms: int | None) -> tuple[int, int]:
        with self.lock:
            now = now_ms()
            slot = _room(self._checked(ns, key, if_version, now))
            live = slot.live(now)
            value = add_checked(integer_of(_value_of(slot)) if live else 0, by)
            data = str(value).encode()
            slot.version += 1
            slot.data, slot.items, slot.size = data, None, len(data)
            slot.expires_at = _expiry(ttl_ms, slot.expires_at if live else None, now)
            return value, slot.version

    def _patch(
        self, ns: str, key: str, patcher: Patcher, if_version: int | None, ttl_ms: int | None
    ) -> tuple[bytes, int]:
        with self.lock:
            now = now_ms()
            slot = _room(self._checked(ns, key, if_version, now))
            live = slot.live(now)
            data = patcher(_value_of(slot) if live else None)
            slot.version += 1
            slot.data, slot.items, slot.size = data, None, len(data)
            slot.expires_at = _expiry(ttl_ms, slot.expires_at if live else None, now)
            return data, slot.version

    def batch(self, ops: Sequence[BatchOp]) -> list[Any]:
        """All ops on a copy of the slots they touch; the copies replace the originals only when every
        op succeeded, so a failure (or a conflict) leaves nothing written."""
        with self.lock:
            saved = {(op.ns, op.key): copy.deepcopy(self.slots.get((op.ns, op.key))) for op in ops}
            try:
                return _run_batch(self, ops)
            except BaseException:
                for where, slot in saved.items():
                    if slot is None:
                        self.slots.pop(where, None)
                    else:
                        self.slots[where] = slot
                raise

    def sweep(self, limit: int = 1000) -> int:
        with self.lock:
            now = now_ms()
            expired = [slot for slot in self.slots.values() if slot.expires_at is not None and slot.expires_at <= now][
                :limit
            ]
            for slot in expired:
                slot.clear()
            return len(expired)

    # -- internals ---------------------------------------------------------------------------

    def _checked(self, ns: str, key: str, if_version: int | None, now: int) -> _Slot:
        slot = self.slots.setdefault((ns, key), _Slot(0))
        current = slot.version if slot.live(now) else 0
        if if_version is not None and if_version != current:
            raise VersionConflict(current_version=current)
        return slot

    def _list(self, ns: str, key: str, now: int) -> _Slot:
        """The key's slot as a list of items: an expired or absent one emptied, a stored value split."""
        slot = self.slots.setdefault((ns, key), _Slot(0))
        if not slot.live(now):
            slot.clear()
        elif slot.data is not None:
            if not slot.data.startswith(b"["):
                raise NotAList(f"{key!r} holds a value that is not a list")
            slot.items, slot.data = split_list(slot.data), None
        return slot

    def _part(self, ns: str, key: str, pick: Any) -> ListPage | None:
        with self.lock:
            now = now_ms()
            slot = self.slots.get((ns, key))
            if slot is None or not slot.live(now):
                return None
            items = slot.items if slot.items is not None else _stored_items(slot, key)
            return ListPage(list(pick(items)), slot.version, len(items))


def _run_batch(state: MemoryState, ops: Sequence[BatchOp]) -> list[Any]:
    """Each op as its own call would run it (the lock is re-entrant); version conflicts gathered."""
    gathered = Gathered()
    for index, op in enumerate(ops):
        with gathered.op(index, op):
            gathered.results.append(_APPLY[op.op](state, op))
    return gathered.answers()


def _patch(state: MemoryState, op: BatchOp) -> tuple[bytes, int]:
    assert op.patcher is not None, "a patch op carries its patcher"
    return state._patch(op.ns, op.key, op.patcher, op.if_version, op.ttl_ms)


_APPLY: dict[str, Callable[[MemoryState, BatchOp], Any]] = {
    "put": lambda state, op: state._put(op.ns, op.key, op.data, op.if_version, op.ttl_ms),
    "delete": lambda state, op: state._delete(op.ns, op.key, op.if_version),
    "append": lambda state, op: state._append(op.ns, op.key, op.items, op.ttl_ms),
    "trim": lambda state, op: state._trim(op.ns, op.key, op.keep_last, op.if_version, op.ttl_ms),
    "pop": lambda state, op: state._pop(op.ns, op.key, op.if_version),
    "incr": lambda state, op: state._incr(op.ns, op.key, op.by, op.if_version, op.ttl_ms),
    "patch": _patch,
}
"""Each write kind's executor, for ``write`` and for every op of a batch."""


def _value_of(slot: _Slot) -> bytes:
    return slot.data if slot.data is not None else join_items(slot.items or [])


def _stored_items(slot: _Slot, key: str) -> list[bytes]:
    if slot.data is None or not slot.data.startswith(b"["):
        raise NotAList(f"{key!r} holds a value that is not a list")
    return split_list(slot.data)


def _list_size(items: Sequence[bytes]) -> int:
    return list_size(map(len, items), len(items))


def _room(slot: _Slot) -> _Slot:
    """The slot, if one more write leaves its version within ``MAX_VERSION``; the refusal otherwise."""
    if slot.version >= MAX_VERSION:
        raise version_limit()
    return slot
