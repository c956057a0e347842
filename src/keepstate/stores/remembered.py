"""Idempotent writes: the answer a store keeps with a write, in the write's own atomic step.

A write sent with an ``Idempotency-Key`` is remembered as ``(caller, key) -> Remembered``: the
request's fingerprint and the answer it got. ``PlatformFacet.remember(memo, work)`` runs ``work`` (the
write, through the usual facets) so that its effect and its remembered answer commit together or not
at all, and a repeat of the key finds the answer instead of writing again:

- SQLite: ``work``'s one write transaction (``SqliteFile.awrite``, or ``write`` for the sync face:
  ``remember_sync``) is wrapped while the memo is
  ``ARMED``: look the key up, write, render the answer from what the write returned, store it.
- PostgreSQL: a ``work`` that is one write of one statement (``Memo.one_write``) sends that statement's
  twin, which inserts the key's row with the write's raw result (``postgres/state_once.py``); any other
  ``work`` runs in one transaction (its connections are that transaction's, by ``db.aconnection``) that
  first claims the key. Either way a repeat waits on the key's row (10 s, then ``IdempotencyInFlight``),
  then finds the answer.
- memory: the key is held in flight while ``work`` runs on the loop; nothing survives the process.

Refused writes wrote nothing; the server keeps their answer apart from any write (``keep``) so a repeat
is answered the same. Records are kept ``KEEP_MS``, then forgotten by the servers' sweep and
``keepstate purge`` (``purge_remembered``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..errors import IdempotencyInFlight

KEEP_MS = 24 * 3600 * 1000
"""How long an answer is remembered at least: a purge takes records older than this."""
IN_FLIGHT_S = 10.0
"""How long a repeat waits for the first call still being applied before ``IdempotencyInFlight``."""


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer as it was sent: status and body (``b""`` for 204)."""

    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Remembered:
    """What a key holds: the fingerprint of the request that used it first, and that request's answer."""

    fingerprint: bytes
    answer: Answer


@dataclass(frozen=True, slots=True)
class Memo:
    """A write to remember: whose key it is (a key id, or ``token:<hash>`` for a run token), the key, the
    request's fingerprint, and how the write's return value becomes its answer (None: it wrote nothing)."""

    caller: str
    key: str
    fingerprint: bytes
    render: Callable[[Any], Answer | None]
    one_write: bool = False
    """``work`` is one write of one statement and nothing else (a state write but a patch, an emit):
    PostgreSQL writes it and keeps its answer in that statement (``postgres/state_once.py``)."""


def in_flight(key: str) -> IdempotencyInFlight:
    return IdempotencyInFlight(f"a write with idempotency key {key!r} is still being applied: try again later")


class Replay(Exception):
    """Raised inside a write's transaction when its key already holds an answer: the transaction is
    undone (nothing written) and the answer goes back to the caller."""

    def __init__(self, remembered: Remembered) -> None:
        super().__init__("idempotency key already answered")
        self.remembered = remembered


class Armed:
    """A memo waiting for the one write transaction of ``work`` (SQLite): ``used`` once it stored it."""

    __slots__ = ("memo", "used")

    def __init__(self, memo: Memo) -> None:
        self.memo = memo
        self.used = False


ARMED: ContextVar[Armed | None] = ContextVar("keepstate_remembered", default=None)
