"""A write's arguments made into the store's terms, once for the embedded store and the server.

``facet_write`` runs one ``ops.Op`` by the state facet's own call for that write alone (its fast path:
a put is the facet's ``put``, not a batch of one), checked and encoded; ``ANSWERS`` turn that call's
answer into what the scope's call answers. ``StoreOps``/``AsyncStoreOps`` run every write through these
two, so the sync and async doors differ only by the ``await``.
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
    values.check_key(key)
    common: dict[str, Any] = {"if_version": op.if_version, "ttl_ms": op.ttl_ms}
    if kind == "put":
        return BatchOp(kind, ns, key, data=encode_value(op.arg), **common)
    if kind == "delete":
        return BatchOp(kind, ns, key, if_version=op.if_version)
    if kind == "append":
        return BatchOp(kind, ns, key, items=values.encode_items(op.arg), ttl_ms=op.ttl_ms)
    if kind == "incr":
        return BatchOp(kind, ns, key, by=op.arg, **common)
    if kind == "patch":
        return BatchOp(kind, ns, key, patcher=patcher_of(op.arg), **common)
    return BatchOp(kind, ns, key, keep_last=op.arg, **common)


def lone_op(op: Op[Any], ns: str) -> BatchOp:
    """``op`` as a facet op of its own: ``batch_op``'s, or a ``pop`` (which no batch takes)."""
    if op.kind == "pop":
        return BatchOp("pop", ns, values.check_key(op.key), if_version=op.if_version)
    return batch_op(op, ns)


def op_of(kind: str, key: str, fields: dict[str, Any]) -> Op[Any]:
    """A write as a value from its checked body fields (``platform.state.write_fields``)."""
    return Op(kind, key, fields.get(ops.ARGS.get(kind, "")), fields.get("if_version"), fields.get("ttl_ms"))


def facet_write(facet: SyncStateFacet | StateFacet, ns: str, op: Op[Any]) -> Any:
    """Run ``op`` alone by the facet's own call for it (its fast path), its key checked and its value
    encoded as that call checks them; the facet's answer (to await, on an async facet)."""
    values.check_key(op.key)
    call = _FACET_CALLS.get(op.kind)
    if call is None:
        raise ops.unknown(op.kind)
    return call(facet, ns, op)


def encoded(op: Op[Any]) -> Any:
    """A ``put``'s value or an ``append``'s items as the store takes them (checked), made once per op: a
    keyed write's fingerprint (``once.py``) and the write read the same bytes. Other ops: their ``arg``."""
    if op.encoded is None and op.kind in ("put", "append"):
        op.encoded = encode_value(op.arg) if op.kind == "put" else values.encode_items(op.arg)
    return op.arg if op.encoded is None else op.encoded


_FACET_CALLS: dict[str, Callable[[Any, str, Op[Any]], Any]] = {
    "put": lambda f, ns, op: f.put(ns, op.key, encoded(op), op.if_version, op.ttl_ms),
    "delete": lambda f, ns, op: f.delete(ns, op.key, op.if_version),
    "append": lambda f, ns, op: f.append(ns, op.key, encoded(op), op.ttl_ms),
    "trim": lambda f, ns, op: f.trim(ns, op.key, op.arg, op.if_version, op.ttl_ms),
    "pop": lambda f, ns, op: f.pop(ns, op.key, op.if_version),
    "incr": lambda f, ns, op: f.incr(ns, op.key, op.arg, op.if_version, op.ttl_ms),
    "patch": lambda f, ns, op: f.update(ns, op.key, patcher_of(op.arg), op.if_version, op.ttl_ms),
}


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
