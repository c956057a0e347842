"""Embedded writes with an ``idempotency_key``: applied once per key, on the store's own records.

``Scope.append(..., idempotency_key="k")`` on a store opened with ``keepstate.open`` runs the write
through ``PlatformFacet.remember``, the same atomic step the server's ``Idempotency-Key`` takes (Redis,
which has no platform records, keeps a record beside the scope's keys in the write's own script:
``StateFacet.write_once``): the write and its answer commit together, and a repeat of the key (a
process that restarted after a write it could not see answered) gets the first answer back, writing
nothing. The answer kept is what the scope's call returned, as JSON; a repeat with the key and another
write is ``IdempotencyMismatch``.
Keys of embedded writes are the store's own, apart from every server caller's, and are forgotten a
day later like theirs (``keepstate purge``, a server's sweep; on Redis the record expires; on a Redis
Cluster a key is its scope's own, its record in the scope's hash slot).
"""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

import orjson

from . import values, writes
from .errors import IdempotencyMismatch
from .ops import Op
from .scope import Appended
from .stores.base import Database
from .stores.lists import join_items
from .stores.remembered import Answer, Memo, Remembered

T = TypeVar("T")
CALLER = "store"
"""Whose keys embedded writes use: every process on the store shares them, so a restarted one finds its own."""


def fingerprint(ns: str, op: Op[Any]) -> bytes:
    """What a repeat must match: the scope and every argument of the write (the argument as JSON, from
    the bytes the write stores where it has them: an append's items make the list's JSON)."""
    arg = writes.encoded(op)
    if op.kind == "append":
        arg = join_items(arg)
    elif not isinstance(arg, bytes):
        arg = values.encode(arg)
    what = [ns, op.kind, op.key, arg, op.if_version, op.ttl_ms]
    return hashlib.sha256(orjson.dumps(what, default=bytes.decode)).digest()


async def write_once(database: Database, ns: str, op: Op[T]) -> T:
    """``op`` on ``ns``, applied once per ``op.idempotency_key`` (set): by the platform's records, or by
    the state facet itself on a store without them (Redis)."""
    memo = _memo(ns, op)
    facet = await database.state()
    if not database.capabilities.platform:
        return _answer(op, memo, await facet.write_once(writes.lone_op(op, ns), memo))
    platform = await database.platform()
    return _answer(op, memo, await platform.remember(memo, lambda: writes.facet_write(facet, ns, op)))


def write_once_sync(database: Database, ns: str, op: Op[T]) -> T:
    """``write_once`` for the sync face, on the caller's thread (``Database.remembers_sync``)."""
    memo = _memo(ns, op)
    facet = database.sync_state()
    return _answer(op, memo, database.remember_sync(memo, lambda: writes.facet_write(facet, ns, op)))


def _memo(ns: str, op: Op[Any]) -> Memo:
    assert op.idempotency_key is not None
    answer_of = writes.ANSWERS[op.kind]

    def render(raw: Any) -> Answer:
        if op.kind in ("patch", "pop") and raw is not None:
            return Answer(200, bytes(raw[0]))  # the value as the store holds it: JSON already, not decoded here
        return Answer(200, orjson.dumps(answer_of(raw), default=list))  # an Appended is a list

    return Memo(CALLER, op.idempotency_key, fingerprint(ns, op), render, one_write=op.kind != "patch")


def _answer(op: Op[T], memo: Memo, result: Any) -> T:
    """What the scope's call answers: its write's answer, or the one its key kept."""
    if not isinstance(result, Remembered):
        answer: T = writes.ANSWERS[op.kind](result)
        return answer
    if result.fingerprint != memo.fingerprint:
        raise IdempotencyMismatch(f"idempotency key {op.idempotency_key!r} was used for another write")
    kept: Any = values.decode(result.answer.body)
    if op.kind in ("append", "trim"):
        kept = Appended(*kept)
    replayed: T = kept
    return replayed
