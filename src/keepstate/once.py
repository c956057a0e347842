"""Embedded writes with an ``idempotency_key``: applied once per key, on the store's own records.

``Scope.append(..., idempotency_key="k")`` on a store opened with ``keepstate.open`` runs the write
through ``PlatformFacet.remember``, the same atomic step the server's ``Idempotency-Key`` takes: the
write and its answer commit together, and a repeat of the key (a process that restarted after a
write it could not see answered) gets the first answer back, writing nothing. The answer kept is what
the scope's call returned, as JSON; a repeat with the key and another write is ``IdempotencyMismatch``.
Keys of embedded writes are the store's own, apart from every server caller's, and are forgotten a
day later like theirs (``keepstate purge``, a server's sweep).
"""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

import orjson

from . import values, writes
from .errors import IdempotencyMismatch, InvalidRequest
from .ops import Op
from .scope import Appended
from .stores.base import Database
from .stores.remembered import Answer, Memo, Remembered

T = TypeVar("T")
CALLER = "store"
"""Whose keys embedded writes use: every process on the store shares them, so a restarted one finds its own."""


def fingerprint(ns: str, op: Op[Any]) -> bytes:
    """What a repeat must match: the scope and every argument of the write."""
    what = [ns, op.kind, op.key, values.encode(op.arg), op.if_version, op.ttl_ms]
    return hashlib.sha256(orjson.dumps(what, default=bytes.decode)).digest()


async def write_once(database: Database, ns: str, op: Op[T]) -> T:
    """``op`` on ``ns``, applied once per ``op.idempotency_key`` (set)."""
    memo = _memo(database, ns, op)
    platform, facet = await database.platform(), await database.state()
    return _answer(op, memo, await platform.remember(memo, lambda: writes.facet_write(facet, ns, op)))


def write_once_sync(database: Database, ns: str, op: Op[T]) -> T:
    """``write_once`` for the sync face, on the caller's thread (``Database.remembers_sync``)."""
    memo = _memo(database, ns, op)
    facet = database.sync_state()
    return _answer(op, memo, database.remember_sync(memo, lambda: writes.facet_write(facet, ns, op)))


def _memo(database: Database, ns: str, op: Op[Any]) -> Memo:
    assert op.idempotency_key is not None
    if not database.capabilities.platform:
        raise InvalidRequest(
            "idempotency_key needs a store that keeps records of writes: memory://, sqlite:/// or postgresql:// "
            "(Redis holds state only)"
        )
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
