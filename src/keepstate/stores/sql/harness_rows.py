"""How a log entry's JSON lies in rows: chunks of at most ``chunk_size`` bytes, part 0 first.

Pure functions: splitting bytes (never characters), joining rows back into entries, and planning an
append as columns for one PostgreSQL statement.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple


def split_chunks(data: bytes, size: int) -> list[bytes]:
    """Split UTF-8 JSON bytes into rows of at most ``size`` bytes; joining them gives ``data`` back.

    Splitting bytes, not characters, is what keeps a character across a boundary intact: the rows
    are only ever read back joined, never decoded one by one.
    """
    if len(data) <= size:
        return [data]
    return [data[at : at + size] for at in range(0, len(data), size)]


def join_chunks(rows: Iterable[tuple[Any, ...]]) -> Iterator[tuple[int, str | None, bytes, int]]:
    """Rows ``(seq, part, id, data, created_at)`` ordered by ``(seq, part)`` → whole entries."""
    head: tuple[int, str | None, int] | None = None
    parts: list[bytes] = []
    for seq, part, entry_id, data, created_at in rows:
        if part == 0:
            if head is not None:
                yield head[0], head[1], b"".join(parts), head[2]
            head, parts = (seq, entry_id, created_at), []
        parts.append(bytes(data))
    if head is not None:
        yield head[0], head[1], b"".join(parts), head[2]


class Batch(NamedTuple):
    """An append as columns, one item per stored row (``parts``: how many its entry has), for one statement.

    Entries are numbered ``k`` from 1 in order of first appearance; an id given twice keeps its
    first place and creation time and takes the later data, as writing them one by one would.
    ``last`` is the ``k`` of the last entry given, whose position the append returns.
    """

    k: list[int]
    part: list[int]
    parts: list[int]
    id: list[str | None]
    data: list[bytes]
    created_at: list[int]
    ids: list[str]
    last: int


def plan_batch(entries: Iterable[tuple[str | None, bytes, int]], chunk_size: int) -> Batch:
    """``(id, JSON bytes, created_at)`` entries → a ``Batch`` of chunk rows with unique ids."""
    places: dict[str, int] = {}
    unique: list[tuple[str | None, bytes, int]] = []
    last = 0
    for entry_id, data, created_at in entries:
        place = places.get(entry_id) if entry_id is not None else None
        if place is None:
            unique.append((entry_id, data, created_at))
            last = len(unique)
            if entry_id is not None:
                places[entry_id] = last
        else:
            unique[place - 1] = (entry_id, data, unique[place - 1][2])
            last = place
    batch = Batch([], [], [], [], [], [], list(places), last)
    for k, (entry_id, data, created_at) in enumerate(unique, 1):
        chunks = split_chunks(data, chunk_size)
        for part, chunk in enumerate(chunks):
            batch.k.append(k)
            batch.part.append(part)
            batch.parts.append(len(chunks))
            batch.id.append(entry_id)
            batch.data.append(chunk)
            batch.created_at.append(created_at)
    return batch
