"""A list's items packed into segment rows and cut back out of them: pure functions, no I/O.

A segment holds comma-joined item JSON and, since schema v2, ``lens``: each item's byte length, so
an item is found by arithmetic (in Python to read, in SQL to trim and pop) instead of by parsing.
Segments written before v2 have no ``lens``: a read finds their items by parsing, and the first trim
or pop that cuts one packs its items anew.
Items are packed so that a segment's weight (bytes + 4 per length) stays under ``SEGMENT_BYTES``;
an item heavier than that gets a segment of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import NotAList
from ..lists import split_list
from ..records import ListPage
from .state_sql import SEGMENT_BYTES

LEN_BYTES = 4
"""What one item's entry in ``lens`` weighs."""


def weight(item_sizes: Sequence[int]) -> int:
    """The weight of a segment holding items of these sizes: bytes, commas and lengths."""
    return sum(item_sizes) + max(len(item_sizes) - 1, 0) + LEN_BYTES * len(item_sizes)


@dataclass(frozen=True, slots=True)
class Chunks:
    """Items packed into segments-to-be, as the SQL's arrays want them."""

    payloads: list[bytes]
    counts: list[int]
    offsets: list[int]
    """Items before each chunk."""
    lens: list[int]
    """Every item's length, all chunks together."""
    last_weight: int

    def params(self) -> dict[str, Any]:
        return {
            "payloads": self.payloads,
            "counts": self.counts,
            "offsets": self.offsets,
            "lens": self.lens,
            "chunks": len(self.payloads),
            "count": len(self.lens),
            "last_weight": self.last_weight,
            "last_offset": self.offsets[-1] if self.offsets else 0,
        }


def chunk(items: Sequence[bytes]) -> Chunks:
    """Pack items, in order, into as few segments under ``SEGMENT_BYTES`` as fit."""
    groups: list[list[bytes]] = []
    room = 0
    for item in items:
        cost = len(item) + LEN_BYTES
        if groups and room >= cost + 1:
            groups[-1].append(item)
            room -= cost + 1
        else:
            groups.append([item])
            room = SEGMENT_BYTES - cost
    offsets, seen = [], 0
    for group in groups:
        offsets.append(seen)
        seen += len(group)
    last = weight([len(item) for item in groups[-1]]) if groups else 0
    return Chunks(
        [b",".join(group) for group in groups],
        [len(group) for group in groups],
        offsets,
        [len(item) for item in items],
        last,
    )


def parts(items: bytes, lens: Sequence[int] | None) -> list[bytes]:
    """The items of one segment: cut by their lengths, or parsed when the segment has none."""
    if lens is None:
        return split_list(b"[" + items + b"]")
    found, at = [], 0
    for size in lens:
        found.append(items[at : at + size])
        at += size + 1
    return found


def window(length: int, tail: int | None, start: int, limit: int) -> tuple[int, int]:
    """Which items (from 0) a ``tail(n)`` or an ``items(start, limit)`` asks for: ``[first, end)``."""
    if tail is not None:
        return max(length - tail, 0), length
    return start, start + limit


def page(
    rows: Iterable[tuple[Any, ...]], key: str, tail: int | None, start: int = 0, limit: int = 0
) -> ListPage | None:
    """The ``ListPage`` of a ``state_sql.TAIL``/``ITEMS`` answer (None: no row, the key is absent)."""
    rows = list(rows)
    if not rows:
        return None
    version, kind, whole, length, base = rows[0][:5]
    if kind == "v":
        if whole is None:
            raise NotAList(f"{key!r} holds a value that is not a list")
        every = split_list(bytes(whole))
        first, end = window(len(every), tail, start, limit)
        return ListPage(every[first:end], int(version), len(every))
    first, end = window(int(length), tail, start, limit)
    picked: list[bytes] = []
    for *_, pos, items, lens in rows:
        if pos is not None:
            offset = first + int(base) - int(pos)
            picked += parts(bytes(items), lens)[max(offset, 0) : max(offset + end - first, 0)]
    return ListPage(picked, int(version), int(length))
