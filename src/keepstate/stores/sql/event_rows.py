"""A worker's emit as one row of ``ks_run_events`` and back: pure functions, no I/O (schema step 10).

A row holds the events ``seq - n + 1 .. seq`` of one emit, written at one time: ``data`` their data one
after another, ``sizes`` their byte lengths (comma-joined; NULL for a row of one event), ``type`` the last
one's type and ``types`` all of them as a JSON array, NULL when they share ``type`` (an emit's events
mostly do). A row of one event is what every row was before step 10, and what the platform's triggers
write: both new columns NULL.

Why: a row per event cost an emit of 100 a hundred rows and index entries (on SQLite some 13 pages of
write-ahead log against 7 for an append of the same items, and ~100 µs more per call; on PostgreSQL the
server's work and the parameters psycopg dumps an element at a time), where a list packs its items into
segments. ``seq`` stays the key: a row's last event orders it, reads ask for the rows whose last ``seq``
is past ``after`` and cut the first one, the cap and the heads count events as before, and a dump
carries the rows as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import orjson

from ..records import NewEvent, StoredEvent

Row = tuple[int, str, bytes, int, "str | None", "str | None"]
"""``seq, type, data, at, sizes, types``, as ``sql.events.READ`` selects them."""


@dataclass(frozen=True, slots=True)
class Packed:
    """An emit's events as the columns of one row."""

    count: int
    type: str
    types: str | None
    sizes: str | None
    data: bytes


def packed(events: Sequence[NewEvent]) -> Packed:
    """``events`` (at least one) as one row's columns."""
    kinds = [kind for kind, _ in events]
    last = kinds[-1]
    types = None if kinds.count(last) == len(kinds) else orjson.dumps(kinds).decode()
    sizes = None if len(events) == 1 else ",".join([str(len(data)) for _, data in events])
    return Packed(len(events), last, types, sizes, b"".join([data for _, data in events]))


def unpacked(rows: Iterable[Row], after: int, limit: int) -> list[StoredEvent]:
    """The events of ``rows`` (in ``seq`` order, each row's last past ``after``) after ``after``, at most
    ``limit`` of them."""
    found: list[StoredEvent] = []
    for seq, kind, data, at, sizes, types in rows:
        if sizes is None:
            found.append(StoredEvent(seq, kind, bytes(data), at))
        else:
            found += _events(seq, kind, memoryview(data), at, sizes, types, after)
        if len(found) >= limit:
            break
    return found[:limit]


def _events(
    seq: int, kind: str, data: memoryview, at: int, sizes: str, types: str | None, after: int
) -> Iterable[StoredEvent]:
    lengths = [int(size) for size in sizes.split(",")]
    kinds: list[str] = orjson.loads(types) if types is not None else [kind] * len(lengths)
    first, start = seq - len(lengths) + 1, 0
    for n, (size, each) in enumerate(zip(lengths, kinds, strict=True)):
        if first + n > after:
            yield StoredEvent(first + n, each, bytes(data[start : start + size]), at)
        start += size
