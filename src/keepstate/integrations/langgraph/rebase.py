"""What a checkpoint's channel is stored as: a delta, a full value, or a merge (no I/O here).

LangGraph's checkpointer forks a thread when two processes continue it at once: each writes a
checkpoint whose parent is the one it read, and the thread's latest is whichever came last, so the
other's messages vanish from its state. keepstate merges instead. When a put continues the checkpoint
this process last saw as the thread's latest, but another process has moved the latest on since
(``base`` is then that latest, not the parent), each list channel whose new value extends what this
process saw (``view``) is stored as the latest's value plus the items this process appended. Later
puts of the same run keep rebasing on what was stored, since their values still lack the other's
items (the process's view is remembered until LangGraph reads the checkpoint back). A channel that is
not a list, or whose value does not extend the view (messages removed or edited), is stored as given:
the last writer wins there, as in LangGraph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import blobs

Version = str | int | float
View = tuple[Version | None, tuple[Any, ...]]
"""LangGraph's own version and value of a channel, where they differ from what is stored."""
MISSING: Any = object()
"""A channel without a value in the checkpoint (or without a stored blob)."""


@dataclass(frozen=True)
class Side:
    """One channel at one checkpoint: its version, value (``MISSING`` if none) and delta depth."""

    version: Version | None
    value: Any = MISSING
    depth: int = 0


@dataclass(frozen=True)
class Stored:
    """How one channel of a new checkpoint is kept.

    ``record``: the blob to write at ``version`` (None: an existing blob serves); ``items``: the
    list value, for the cache; ``appended``: the items added to the stored list (None when the list
    was replaced whole); ``view``: LangGraph's own version and value when they differ from what is
    stored (a merge)."""

    version: Version
    record: blobs.Record | None = None
    items: tuple[Any, ...] | None = None
    appended: Sequence[Any] | None = None
    view: View | None = None


def written(serde: Any, version: Version, value: Any, base: Side) -> Stored:
    """A channel LangGraph wrote, stored on ``base`` (its parent's stored value) without merging."""
    if value is MISSING:
        return Stored(version, blobs.EMPTY)
    if type(value) is not list:  # a subclass (or a named tuple) is a value of its own, kept whole
        return Stored(version, blobs.plain(serde, value))
    if _is_list(base.value) and base.version is not None and blobs.extends(value, base.value):
        tail = value[len(base.value) :]
        return _extended(serde, version, base, tail)
    record = blobs.full(serde, value)
    return Stored(version, record, tuple(blobs.decoded(serde, record["items"])))


def _extended(serde: Any, version: Version, base: Side, tail: Sequence[Any]) -> Stored:
    """``base``'s list with ``tail`` appended: a delta on it, or a snapshot once the chain is long.
    The cache gets ``base``'s items and fresh copies of the tail's (never LangGraph's own objects,
    which the application may go on changing)."""
    length = len(base.value) + len(tail)
    if base.depth < blobs.SNAPSHOT_EVERY:
        record = blobs.delta(serde, base.version, tail, length, base.depth + 1)  # type: ignore[arg-type]
        added = record["tail"]
    else:
        record = blobs.full(serde, (*base.value, *tail))
        added = record["items"][len(base.value) :]
    return Stored(version, record, (*base.value, *blobs.decoded(serde, added)), tail)


def merged(
    serde: Any, given: Side, view: Side, base: Side, next_version: Callable[[Version], Version]
) -> Stored | None:
    """A channel rebased from what this process saw (``view``) onto ``base``; None if it cannot be."""
    seen = () if view.value is MISSING else view.value  # a channel this process has not seen yet
    if not (_is_list(given.value) and _is_list(seen) and _is_list(base.value)):
        return None
    if not blobs.extends(given.value, seen) or base.version is None or given.version is None:
        return None
    tail = tuple(given.value[len(seen) :])
    view_now = (given.version, tuple(given.value))
    if not tail:
        return Stored(base.version, None, tuple(base.value), (), view_now)
    stored = _extended(serde, next_version(highest(given.version, base.version)), base, tail)
    return Stored(stored.version, stored.record, stored.items, tail, view_now)


def same(view: Side, base: Side) -> bool:
    """Whether the stored base holds what this process saw (nothing to merge)."""
    if view.version is not None and view.version == base.version and view.value is base.value:
        return True
    if _is_list(view.value) and _is_list(base.value):
        return len(view.value) == len(base.value) and blobs.extends(base.value, view.value)
    return view.version == base.version and view.value is not MISSING and base.value is not MISSING


def highest(*versions: Version) -> Version:
    return max(versions, key=lambda version: int(str(version).split(".")[0]))


def _is_list(value: Any) -> bool:
    """A plain list (as LangGraph gives it, or a tuple as the cache keeps it), not a subclass."""
    return type(value) in (list, tuple)
