"""LangGraph values as keepstate JSON, and list channels stored as deltas (no I/O here).

A value goes through the saver's ``serde`` (``dumps_typed``), so what comes back is what LangGraph's
own savers give back. The bytes are kept readable where they can be: msgpack bytes that are plain
JSON data (and re-encode to the very same bytes) are stored as that JSON, anything else (LangChain
messages, bytes, encrypted payloads) as base64.

A list channel (the ``messages`` of ``MessagesState``) whose new value extends an earlier stored
version is stored as a *delta*: the appended items and the version it extends. Every ``SNAPSHOT_EVERY``
deltas a full snapshot ends the chain, so a cold read walks at most that many records; a snapshot
larger than one keepstate value is split into parts.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import ormsgpack

from keepstate import values
from keepstate.errors import InvalidValue

SNAPSHOT_EVERY = 256
"""Deltas in a row before a full snapshot: bounds the records a cold read of a list walks (once per
process and thread: the walk stops at the first version in the cache), and spreads the snapshot's
cost, which grows with the list, over that many writes."""
PART_BYTES = 512 * 1024
"""The most encoded items one part of a snapshot holds (a keepstate value holds 1 MiB)."""

Encoded = dict[str, Any]
"""``{"t": type, "j": json}`` or ``{"t": type, "b": base64}``."""
Record = dict[str, Any]
"""A stored blob: ``{"v": Encoded}``, ``{"empty": true}``, or a list: ``{"n", "items"}`` (full),
``{"n", "parts"}`` (full, split), ``{"n", "base", "tail", "d"}`` (a delta on version ``base``)."""

EMPTY: Record = {"empty": True}


def encode(serde: Any, value: Any) -> Encoded:
    """``value`` through ``serde``, as JSON keepstate stores."""
    kind, data = serde.dumps_typed(value)
    if kind == "msgpack":
        readable = _plain_msgpack(data)
        if readable is not None:
            return {"t": kind, "j": readable[0]}
    return {"t": kind, "b": base64.b64encode(data).decode("ascii")}


def decode(serde: Any, encoded: Encoded) -> Any:
    if "j" in encoded:
        return serde.loads_typed((encoded["t"], ormsgpack.packb(encoded["j"])))
    return serde.loads_typed((encoded["t"], base64.b64decode(encoded["b"])))


def _plain_msgpack(data: bytes) -> tuple[Any] | None:
    """The JSON data ``data`` packs, when it is plain JSON that packs back to exactly ``data``."""
    try:
        value = ormsgpack.unpackb(data)
        if ormsgpack.packb(value) != data:
            return None
        values.encode(value)
    except (ValueError, TypeError, InvalidValue, ormsgpack.MsgpackDecodeError):
        return None
    return (value,)


def decoded(serde: Any, items: Sequence[Encoded]) -> list[Any]:
    return [decode(serde, item) for item in items]


def plain(serde: Any, value: Any) -> Record:
    return {"v": encode(serde, value)}


def full(serde: Any, items: Sequence[Any]) -> Record:
    return {"n": len(items), "items": [encode(serde, item) for item in items]}


def delta(serde: Any, base: str | int | float, tail: Sequence[Any], length: int, depth: int) -> Record:
    return {"n": length, "base": base, "tail": [encode(serde, item) for item in tail], "d": depth}


def is_list(record: Record) -> bool:
    return "n" in record


def depth(record: Record) -> int:
    """How many deltas lead to this record from its snapshot (0 for a snapshot)."""
    return int(record.get("d", 0))


def split(record: Record) -> tuple[Record, list[Record]] | None:
    """A full record too large for one value, as a head naming its parts and the parts; else None."""
    items = record.get("items")
    if items is None or len(items) < 2:
        return None
    sizes = [len(orjson.dumps(item)) + 1 for item in items]
    if sum(sizes) <= PART_BYTES:
        return None
    parts = list(_parts(items, sizes))
    return {"n": record["n"], "parts": len(parts)}, parts


def _parts(items: list[Encoded], sizes: list[int]) -> Iterator[Record]:
    start, size = 0, 0
    for index, item_size in enumerate(sizes):
        if size + item_size > PART_BYTES and index > start:
            yield {"items": items[start:index]}
            start, size = index, 0
        size += item_size
    yield {"items": items[start:]}


def extends(value: Sequence[Any], prefix: Sequence[Any]) -> bool:
    """Whether ``value`` starts with every item of ``prefix`` (the same objects, or equal ones)."""
    if len(value) < len(prefix):
        return False
    return all(a is b or a == b for a, b in zip(prefix, value, strict=False))
