"""JSON Merge Patch (RFC 7396): what ``PATCH`` does to a stored value, as one pure function.

``merge(target, patch)``: a patch that is not an object replaces the target whole; an object patch
merges into an object target (a non-object target counts as ``{}``), member by member, recursively,
a ``null`` member removing that member. ``patcher(patch)`` gives the store-side rewrite of canonical
JSON bytes that ``StateFacet.update`` runs inside its atomic step, refusing a result over 1 MiB.
"""

from __future__ import annotations

from typing import Any

from . import values
from .stores.records import Patcher


def merge(target: Any, patch: Any) -> Any:
    """RFC 7396's MergePatch(target, patch); neither argument is changed."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = merge(merged.get(name), value)
    return merged


def patcher(patch: Any) -> Patcher:
    """The rewrite that applies ``patch`` to a stored value (absent: ``{}``), as canonical JSON bytes."""

    def rewrite(current: bytes | None) -> bytes:
        target = {} if current is None else values.decode(current)
        data = values.encode(merge(target, patch))
        values.check_size(len(data), "the patched value")
        return data

    return rewrite
