"""A write's arguments made into the store's terms, once for the embedded store and the server.

``batch_op`` checks and encodes one write (``put``, ``delete``, ``append``, ``incr``, ``patch``,
``trim``) into a ``BatchOp``; ``run_batch`` sends a batch to a sync facet and returns the facet's
answers; ``scoped_conflicts`` turns the facet's conflicts (by namespace) into the API's (by scope).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import patch, values
from .errors import InvalidRequest, VersionConflict
from .stores.records import BATCH_OPS, BatchOp


def batch_op(op: str, ns: str, key: str, fields: dict[str, Any]) -> BatchOp:
    """One write of a batch, its value checked and encoded as that call alone would check it."""
    if op not in BATCH_OPS:
        raise InvalidRequest(f"op must be one of {', '.join(BATCH_OPS)}, got {op!r:.40}")
    values.check_key(key)
    common: dict[str, Any] = {"if_version": fields.get("if_version"), "ttl_ms": fields.get("ttl_ms")}
    if op == "put":
        return BatchOp(op, ns, key, data=encode_value(fields.get("value")), **common)
    if op == "delete":
        return BatchOp(op, ns, key, if_version=common["if_version"])
    if op == "append":
        return BatchOp(op, ns, key, items=values.encode_items(fields.get("items", ())), ttl_ms=common["ttl_ms"])
    if op == "incr":
        return BatchOp(op, ns, key, by=fields.get("by", 1), **common)
    if op == "patch":
        return BatchOp(op, ns, key, patcher=patcher_of(fields.get("patch")), **common)
    return BatchOp(op, ns, key, keep_last=fields["keep_last"], **common)


def encode_value(value: Any) -> bytes:
    """A value to store: canonical JSON bytes, at most 1 MiB."""
    data = values.encode(value)
    values.check_size(len(data))
    return data


def patcher_of(merge_patch: Any) -> Any:
    """The store-side rewrite of a merge patch, the patch itself checked first (its own paths)."""
    values.encode(merge_patch)
    return patch.patcher(merge_patch)


def scope_of(ns: str) -> str:
    """The scope kind of a namespace (``env/kind/agent/id``)."""
    return ns.split("/", 2)[1]


def scoped_conflicts(error: VersionConflict) -> VersionConflict:
    """The facet's batch conflict, told by scope and key as the API tells it."""
    conflicts = getattr(error, "conflicts", None)
    if conflicts is None:
        return error
    told = [
        {"index": c["index"], "scope": scope_of(c["ns"]), "key": c["key"], "current_version": c["current_version"]}
        for c in conflicts
    ]
    return VersionConflict(
        f"{len(told)} write(s) of the batch found another version; nothing was written",
        current_version=told[0]["current_version"],
        conflicts=told,
    )


def check_batch_size(ops: Sequence[object]) -> None:
    from .protocol import MAX_BATCH_OPS

    if not 1 <= len(ops) <= MAX_BATCH_OPS:
        raise InvalidRequest(f"a batch has 1 to {MAX_BATCH_OPS} ops, got {len(ops)}")
