"""A write's arguments made into the store's terms, once for the embedded store and the server.

``facet_write`` runs one ``ops.Op`` through the state facet's one door for a write alone (``write``,
where each backend keeps its fast path: a put is not a batch of one), checked and encoded by
``lone_op``; ``ANSWERS`` turn the facet's answer into what the scope's call answers.
``StoreOps``/``AsyncStoreOps`` run every write through these two, so the sync and async doors differ
only by the ``await``.
``batch_op`` checks and encodes one write of a batch (``put``, ``delete``, ``append``, ``incr``,
``patch``, ``trim``: the same ``Op`` a call alone makes, or ``op_of`` a server body's) into a
``BatchOp``; ``scoped_conflicts`` turns the facet's conflicts (by namespace) into the API's (by scope).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import ops, patch, values
from .errors import InvalidRequest, VersionConflict
from .ops import Op
from .scope import Appended
from .stores.base import StateFacet, SyncStateFacet
from .stores.records import BATCH_OPS, BatchOp


def batch_op(op: Op[Any], ns: str) -> BatchOp:
    """One write of a batch, its value checked and encoded as that call alone would check it."""
    kind, key = op.kind, op.key
    if kind not in BATCH_OPS:
        raise InvalidRequest(f"op must be one of {', '.join(BATCH_OPS)}, got {kind!r:.40}")
    return _made(op, ns, values.check_key(key))


def lone_op(op: Op[Any], ns: str) -> BatchOp:
    """``op`` as a write of its own (``StateFacet.write``): ``batch_op``'s, or a ``pop`` (which no batch
    takes); an unknown kind refused as every door refuses it."""
    if op.kind not in ops.KINDS:
        raise ops.unknown(op.kind)
    return _made(op, ns, values.check_key(op.key))


def _made(op: Op[Any], ns: str, key: str) -> BatchOp:
    """The facet's op of a checked kind and key (the commonest first: every write of a scope is made here)."""
    kind, if_version, ttl_ms = op.kind, op.if_version, op.ttl_ms
    if kind == "put":  # positional: a put is made on every write of a value, and keywords cost here
        return BatchOp(kind, ns, key, encoded(op), (), 0, None, 0, if_version, ttl_ms)
    if kind == "append":
        return BatchOp(kind, ns, key, b"null", encoded(op), 0, None, 0, None, ttl_ms)
    if kind == "incr":
        return BatchOp(kind, ns, key, by=op.arg, if_version=if_version, ttl_ms=ttl_ms)
    if kind == "delete" or kind == "pop":
        return BatchOp(kind, ns, key, if_version=if_version)
    if kind == "patch":
        return BatchOp(kind, ns, key, patcher=patcher_of(op.arg), if_version=if_version, ttl_ms=ttl_ms)
    return BatchOp(kind, ns, key, keep_last=op.arg, if_version=if_version, ttl_ms=ttl_ms)


def op_of(kind: str, key: str, fields: dict[str, Any]) -> Op[Any]:
    """A write as a value from its checked body fields (``platform.state.write_fields``)."""
    return Op(kind, key, fields.get(ops.ARGS.get(kind, "")), fields.get("if_version"), fields.get("ttl_ms"))


def facet_write(facet: SyncStateFacet | StateFacet, ns: str, op: Op[Any]) -> Any:
    """Run ``op`` alone through the facet's one door (``write``), checked and encoded as that call checks
    it; the facet's answer (to await, on an async facet)."""
    return facet.write(lone_op(op, ns))


def encoded(op: Op[Any]) -> Any:
    """A ``put``'s value or an ``append``'s items as the store takes them (checked), made once per op: a
    keyed write's fingerprint (``once.py``) and the write read the same bytes. Other ops: their ``arg``."""
    if op.encoded is None and op.kind in ("put", "append"):
        op.encoded = encode_value(op.arg) if op.kind == "put" else values.encode_items(op.arg)
    return op.arg if op.encoded is None else op.encoded


ANSWERS: dict[str, Callable[[Any], Any]] = {
    "put": lambda answer: answer,
    "delete": lambda answer: None,
    "append": lambda answer: Appended(*answer),
    "trim": lambda answer: Appended(*answer),
    "pop": lambda answer: None if answer is None else values.decode(answer[0]),
    "incr": lambda answer: answer[0],
    "patch": lambda answer: values.decode(answer[0]),
}
"""What a write answers on a scope, by kind, from the facet's answer to it (alone or in a batch)."""


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
