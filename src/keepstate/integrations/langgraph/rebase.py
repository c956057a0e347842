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
    view: tuple[Version, tuple[Any, ...]] | None = None


def written(serde: Any, version: Version, value: Any, base: Side) -> Stored:
    """A channel LangGraph wrote, stored on ``base`` (its parent's stored value) without merging."""
    if value is MISSING:
        return Stored(version, blobs.EMPTY)
    if not isinstance(value, list):
        return Stored(version, blobs.plain(serde, value))
    items = tuple(value)
    if isinstance(base.value, list | tuple) and base.version is not None and blobs.extends(items, base.value):
        tail = items[len(base.value):]
        if base.depth < blobs.SNAPSHOT_EVERY:
            return Stored(version, blobs.delta(serde, base.version, tail, len(items), base.depth + 1), items, tail)
        return Stored(version, blobs.full(serde, items), items, tail)
    return Stored(version, blobs.full(serde, items), items)


def merged(serde: Any, given: Side, view: Side, base: Side,
           next_version: Callable[[Version], Version]) -> Stored | None:
    """A channel rebased from what this process saw (``view``) onto ``base``; None if it cannot be."""
    if not (_is_list(given.value) and _is_list(view.value) and _is_list(base.value)):
        return None
    if not blobs.extends(given.value, view.value) or base.version is None or given.version is None:
        return None
    tail = tuple(given.value[len(view.value):])
    items = (*base.value, *tail)
    seen = (given.version, tuple(given.value))
    if not tail:
        return Stored(base.version, None, items, (), seen)
    version = next_version(highest(given.version, base.version))
    if base.depth < blobs.SNAPSHOT_EVERY:
        record = blobs.delta(serde, base.version, tail, len(items), base.depth + 1)
    else:
        record = blobs.full(serde, items)
    return Stored(version, record, items, tail, seen)


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
    return isinstance(value, list | tuple)
