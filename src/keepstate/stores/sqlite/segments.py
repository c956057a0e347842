"""Lists built by append on SQLite: their items in bounded segment rows, found by absolute index.

A list's items are joined, as canonical JSON, into rows of ``keepstate_kv_segments`` of about
``SEGMENT_BYTES``; each row is keyed by ``start``, the absolute index of its first item, and holds
``sizes``, each item's byte length, so that items are cut out of its text without parsing JSON
(a segment the first schema wrote has none and is parsed instead). The header (``heads.py``)
keeps the list's ``base`` (the absolute index of its oldest item) and length, so every call costs
the segments it touches:

- ``append`` grows the last segment while it has room, then starts new ones;
- ``tail`` and ``items`` read the segment holding their first item (one primary-key seek) and
  those after it up to their last, never the list;
- ``trim`` deletes the segments wholly below the cut and rewrites the one holding it;
- ``pop`` rewrites (or deletes) the last segment only.

A list written whole by ``put`` stays one value until its first append, trim or pop splits it
into segments; ``tail`` and ``items`` parse such a value whole (it is at most 1 MiB).
Every function here runs inside its caller's transaction (a write, or a read snapshot).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...clock import now_ms
from ...errors import NotAList
from ..lists import appended_size, check_append, join_items, split_list
from ..records import ListPage
from .heads import Head, checked, expiry, read_head, set_list, set_value

SEGMENT_BYTES = 3 * 1024
"""A segment's text stays under this (unless one item is larger): with its key and sizes, it fits
in one 4 KiB page, so an append into it writes that page and the header's, not overflow pages."""
_LAST = "SELECT start, bytes FROM keepstate_kv_segments WHERE ns = ? AND key = ? ORDER BY start DESC LIMIT 1"
_LAST_ITEMS = (
    "SELECT start, items, sizes FROM keepstate_kv_segments WHERE ns = ? AND key = ? ORDER BY start DESC LIMIT 1"
)
_HOLDING = (
    "SELECT start, items, sizes FROM keepstate_kv_segments WHERE ns = ? AND key = ? AND start <= ? "
    "ORDER BY start DESC LIMIT 1"
)
_RANGE = (
    "SELECT start, items, sizes FROM keepstate_kv_segments WHERE ns = ?1 AND key = ?2 AND start < ?4 AND start >= "
    "(SELECT start FROM keepstate_kv_segments WHERE ns = ?1 AND key = ?2 AND start <= ?3 "
    "ORDER BY start DESC LIMIT 1) ORDER BY start"
)
_ALL = "SELECT items FROM keepstate_kv_segments WHERE ns = ? AND key = ? ORDER BY start"
_GROW = (
    "UPDATE keepstate_kv_segments SET items = items || ',' || ?, sizes = sizes || ',' || ?, bytes = bytes + 1 + ? "
    "WHERE ns = ? AND key = ? AND start = ?"
)
_ADD = "INSERT INTO keepstate_kv_segments (ns, key, start, items, sizes, bytes) VALUES (?, ?, ?, ?, ?, ?)"
_REWRITE = (
    "UPDATE keepstate_kv_segments SET start = ?, items = ?, sizes = ?, bytes = ? WHERE ns = ? AND key = ? AND start = ?"
)
_DROP_ONE = "DELETE FROM keepstate_kv_segments WHERE ns = ? AND key = ? AND start = ?"
_DROP_BELOW = "DELETE FROM keepstate_kv_segments WHERE ns = ? AND key = ? AND start < ? RETURNING bytes"
_DROP_ALL = "DELETE FROM keepstate_kv_segments WHERE ns = ? AND key = ?"
_COPY = (
    "INSERT INTO keepstate_kv_segments (ns, key, start, items, sizes, bytes) "
    "SELECT k.ns, s.key, s.start, s.items, s.sizes, s.bytes FROM keepstate_kv_segments s "
    "JOIN keepstate_kv k ON k.ns = ? AND k.key = s.key AND k.kind = 'l' WHERE s.ns = ?"
)
"""The segments of the lists a copy just wrote into a namespace (emptied first, so it holds no others)."""


# ---------------------------------------------------------------- one segment


@dataclass(slots=True)
class _Segment:
    """A segment as read: its start, its items' bytes joined by commas, and each item's size."""

    start: int
    raw: bytes
    sizes: list[int]

    @classmethod
    def of(cls, row: Any) -> _Segment:
        start, text, sizes = row
        raw = text.encode()
        if sizes is None:  # written by the first schema, which kept no sizes: parse it
            return cls(int(start), raw, [len(item) for item in split_list(b"[" + raw + b"]")])
        return cls(int(start), raw, [int(size) for size in sizes.split(",")])

    def offset(self, index: int) -> int:
        """Where item ``index`` (from 0 in this segment) begins in ``raw``."""
        return sum(self.sizes[:index]) + index

    def pieces(self, low: int, high: int) -> list[bytes]:
        """Items ``low`` … ``high - 1`` of this segment, cut at their sizes: no JSON parsed."""
        offset = self.offset(low)
        found = []
        for size in self.sizes[low:high]:
            found.append(self.raw[offset : offset + size])
            offset += size + 1
        return found


def _sizes_text(items: Sequence[bytes]) -> str:
    return ",".join([str(len(item)) for item in items])


# ---------------------------------------------------------------- reads


def joined(conn: sqlite3.Connection, ns: str, key: str) -> bytes:
    """A list's whole JSON, its segments joined (for ``get``)."""
    return join_items([text.encode() for (text,) in conn.execute(_ALL, (ns, key))])


def tail(conn: sqlite3.Connection, ns: str, key: str, n: int) -> ListPage | None:
    return _window(conn, ns, key, lambda length: (max(length - n, 0), length))


def items(conn: sqlite3.Connection, ns: str, key: str, start: int, limit: int) -> ListPage | None:
    return _window(conn, ns, key, lambda length: (min(start, length), min(start + limit, length)))


def _window(conn: sqlite3.Connection, ns: str, key: str, pick: Callable[[int], tuple[int, int]]) -> ListPage | None:
    """The items ``pick(length)`` names (from, to; counted from the oldest present) of a live list."""
    head = read_head(conn, ns, key, now_ms())
    if not head.live:
        return None
    if head.kind == "v":
        whole = value_items(head, key)
        low, high = pick(len(whole))
        return ListPage(whole[low:high], head.version, len(whole))
    low, high = pick(head.length)
    return ListPage(_range(conn, ns, key, head.base + low, head.base + high), head.version, head.length)


def _range(conn: sqlite3.Connection, ns: str, key: str, low: int, high: int) -> list[bytes]:
    """Items at absolute indexes ``low`` … ``high - 1``, from the segments holding them only."""
    if low >= high:
        return []
    found: list[bytes] = []
    for row in conn.execute(_RANGE, (ns, key, low, high)):
        segment = _Segment.of(row)
        found += segment.pieces(max(low - segment.start, 0), high - segment.start)
    return found


def value_items(head: Head, key: str) -> list[bytes]:
    """The items of a list written whole by ``put``; NotAList for any other value."""
    if head.value is None or not head.value.startswith(b"["):
        raise NotAList(f"{key!r} holds a value that is not a list")
    return split_list(head.value)


# ---------------------------------------------------------------- writes


def append(conn: sqlite3.Connection, ns: str, key: str, new: Sequence[bytes], ttl_ms: int | None) -> tuple[int, int]:
    """Add ``new`` after the last item, creating the list if needed; ``(version, length)``.
    TooLarge past 1 MiB (the caller's transaction then undoes any split of a put list)."""
    now = now_ms()
    head = as_list(conn, ns, key, read_head(conn, ns, key, now))
    size = appended_size(head.size, head.length, [len(item) for item in new])
    check_append(size)
    _pack(conn, ns, key, new, head.base + head.length)
    return set_list(
        conn, ns, key, head.kind, head.version + 1, size, head.length + len(new), head.base, expiry(ttl_ms, head, now)
    )


def trim(
    conn: sqlite3.Connection, ns: str, key: str, keep_last: int, if_version: int | None, ttl_ms: int | None
) -> tuple[int, int]:
    """Drop the oldest items so that at most ``keep_last`` remain; ``(0, 0)``, writing nothing, when absent."""
    now = now_ms()
    head = checked(conn, ns, key, if_version, now)
    if not head.live:
        return 0, 0
    head = as_list(conn, ns, key, head)
    size, length, base = head.size, head.length, head.base
    if keep_last < length:
        cut = base + length - keep_last
        if keep_last:
            size -= _cut(conn, ns, key, cut)
        else:
            conn.execute(_DROP_ALL, (ns, key))
            size = 2
        length, base = keep_last, cut
    return set_list(conn, ns, key, head.kind, head.version + 1, size, length, base, expiry(ttl_ms, head, now))


def pop(conn: sqlite3.Connection, ns: str, key: str, if_version: int | None) -> tuple[bytes, int, int] | None:
    """Remove the last item: ``(item, version, length)``; None, writing nothing, when absent or empty."""
    now = now_ms()
    head = checked(conn, ns, key, if_version, now)
    if not head.live:
        return None
    head = as_list(conn, ns, key, head)
    if head.length == 0:
        return None
    last = _Segment.of(conn.execute(_LAST_ITEMS, (ns, key)).fetchone())
    count = len(last.sizes)
    (item,) = last.pieces(count - 1, count)
    if count > 1:
        _rewrite(conn, ns, key, last.start, last.start, last.raw[: last.offset(count - 1) - 1], last.sizes[:-1])
    else:
        conn.execute(_DROP_ONE, (ns, key, last.start))
    length = head.length - 1
    size = head.size - len(item) - 1 if length else 2
    version, _ = set_list(conn, ns, key, head.kind, head.version + 1, size, length, head.base, expiry(None, head, now))
    return item, version, length


def copy(conn: sqlite3.Connection, source: str, target: str) -> None:
    """The items of every list ``kv.copy`` copied from ``source`` into ``target``."""
    conn.execute(_COPY, (target, source))


def keep_first(conn: sqlite3.Connection, ns: str, key: str, n: int) -> None:
    """Cut a list to its first ``n`` items, stored whole until its next append splits it (a write; its
    expiry kept); an absent key stays absent; NotAList for another value (a fork's cut)."""
    kept = items(conn, ns, key, 0, n)
    if kept is not None:
        head = read_head(conn, ns, key, now_ms())
        set_value(conn, ns, key, head.kind, head.version + 1, join_items(kept.items), head.expires_at)


def as_list(conn: sqlite3.Connection, ns: str, key: str, head: Head) -> Head:
    """The key's header as a list in segments: an absent or expired key a new empty list (an expired
    list's old items dropped), a list written whole by ``put`` split into segments; NotAList else.
    Its ``kind`` stays the row's, for ``set_list`` to know whether the row becomes a list."""
    if not head.live:
        if head.kind == "l":
            conn.execute(_DROP_ALL, (ns, key))
        return Head(version=head.version, kind=head.kind)
    if head.kind == "l":
        return head
    whole = value_items(head, key)
    _pack(conn, ns, key, whole, 0)
    return replace(head, value=None, length=len(whole), base=0)


def _pack(conn: sqlite3.Connection, ns: str, key: str, new: Sequence[bytes], position: int) -> None:
    """Write ``new`` (the items from absolute index ``position`` on) into the last segment while it
    has room, then into new segments."""
    if not new:
        return
    last = conn.execute(_LAST, (ns, key)).fetchone()
    room = SEGMENT_BYTES - int(last[1]) - 1 if last else 0
    chunks = _chunks(new, room)
    first = next(chunks)
    if first:
        text = b",".join(first)
        conn.execute(_GROW, (text.decode(), _sizes_text(first), len(text), ns, key, last[0]))
        position += len(first)
    for chunk in chunks:
        text = b",".join(chunk)
        conn.execute(_ADD, (ns, key, position, text.decode(), _sizes_text(chunk), len(text)))
        position += len(chunk)


def _chunks(new: Sequence[bytes], room: int) -> Iterator[list[bytes]]:
    """Runs of items: the first fits ``room`` (it may be empty), each later one a fresh segment."""
    chunk: list[bytes] = []
    filled = 0
    for item in new:
        cost = len(item) + (1 if chunk else 0)
        if filled + cost > room and (chunk or room < SEGMENT_BYTES):
            yield chunk
            chunk, filled, room, cost = [], 0, SEGMENT_BYTES, len(item)
        chunk.append(item)
        filled += cost
    yield chunk


def _cut(conn: sqlite3.Connection, ns: str, key: str, cut: int) -> int:
    """Drop every item below absolute index ``cut`` (which a segment holds); the JSON bytes freed."""
    holding = _Segment.of(conn.execute(_HOLDING, (ns, key, cut)).fetchone())
    freed = sum(int(size) + 1 for (size,) in conn.execute(_DROP_BELOW, (ns, key, holding.start)).fetchall())
    dropped = cut - holding.start
    if dropped:
        offset = holding.offset(dropped)
        _rewrite(conn, ns, key, holding.start, cut, holding.raw[offset:], holding.sizes[dropped:])
        freed += offset
    return freed


def _rewrite(
    conn: sqlite3.Connection, ns: str, key: str, start: int, new_start: int, raw: bytes, sizes: list[int]
) -> None:
    conn.execute(_REWRITE, (new_start, raw.decode(), ",".join(map(str, sizes)), len(raw), ns, key, start))
