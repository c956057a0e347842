"""Idempotent writes on PostgreSQL: one transaction holds the key's claim, the write and its answer.

The claim is a row with no answer yet, inserted first: a repeat of the key (on this server or any
other) waits on that row until the first write commits (then finds its answer) or rolls back (then
claims the key itself). ``work`` runs on the claim's connection (``db.HELD``), so every statement of
the write, in whichever facet, is part of that transaction; its own ``transaction()`` blocks become
savepoints. Waiting is bounded by ``lock_timeout``: ``IdempotencyInFlight`` after ``IN_FLIGHT_S``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from ...clock import now_ms
from ..records import Emitted
from ..remembered import IN_FLIGHT_S, Answer, Memo, Remembered, in_flight
from ..sql import remembered as sql
from .db import HELD, aconnection
from .platform_sql import pg

T = TypeVar("T")
RECALL, KEEP, SETTLE, PURGE, COUNT_OLD = (
    pg(text) for text in (sql.RECALL, sql.KEEP, sql.SETTLE, sql.PURGE, sql.COUNT_OLD)
)
CLAIM = (
    # lock_timeout bounds the wait on another transaction's claim of the key, then is set back as it was
    "WITH wait AS MATERIALIZED (SELECT current_setting('lock_timeout') AS usual, "
    f"set_config('lock_timeout', '{int(IN_FLIGHT_S * 1000)}', true)) "
    "INSERT INTO ks_remembered (caller, key, fingerprint, created_at) SELECT %s, %s, %s, %s FROM wait "
    "ON CONFLICT (caller, key) DO NOTHING RETURNING (SELECT set_config('lock_timeout', usual, true) FROM wait)"
)

RAW = 0
"""The status of a kept raw result (``state_once``: what a one-statement write returned, a state write's or
an emit's; no HTTP answer has status 0), rendered by the memo of the repeat that finds it."""


async def recall(conn: psycopg.AsyncConnection[Any], caller: str, key: str) -> Remembered | None:
    row = await (await conn.execute(RECALL, (caller, key))).fetchone()
    return None if row is None else Remembered(bytes(row[0]), Answer(int(row[1]), bytes(row[2])))


async def remember(
    pool: psycopg_pool.AsyncConnectionPool, memo: Memo, work: Callable[[], Awaitable[T]]
) -> T | Remembered:
    """Three round trips where the write alone takes one: ``BEGIN`` and the claim pipelined, the write,
    then the answer and ``COMMIT`` pipelined."""
    async with aconnection(pool) as conn:
        try:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                claim = await conn.execute(CLAIM, (memo.caller, memo.key, memo.fingerprint, now_ms()))
            if await claim.fetchone() is None:
                found = await recall(conn, memo.caller, memo.key)
                await conn.execute("ROLLBACK")
                assert found is not None, "a claim is only seen once its write committed its answer"
                return rendered(memo, found)
            token = HELD.set((pool, conn))
            try:
                result = await work()
            finally:
                HELD.reset(token)
            answer = memo.render(result)
            if answer is None:
                raise AssertionError("an idempotent write returned without an answer")
            async with conn.pipeline():
                await conn.execute(SETTLE, (answer.status, answer.body, memo.caller, memo.key))
                await conn.execute("COMMIT")
            return result
        except psycopg.errors.LockNotAvailable:
            await _roll_back(conn)
            raise in_flight(memo.key) from None
        except BaseException:
            await _roll_back(conn)
            raise


def rendered(memo: Memo, found: Remembered) -> Remembered:
    """``found`` with a raw result rendered by ``memo`` (only for the same request: another one is a mismatch)."""
    if found.answer.status != RAW or found.fingerprint != memo.fingerprint:
        return found
    answer = memo.render(raw_result(found.answer.body))
    assert answer is not None, "a kept raw result is a write's"
    return Remembered(found.fingerprint, answer)


def raw_result(body: bytes) -> Any:
    """What the write returned (the state facet's, or an emit's ``Emitted``), from the body its one statement
    kept (``state_once``, ``events.EMIT_ONCE``)."""
    kind, _, rest = body.partition(b":")
    if kind == b"pop":
        version, length, item = rest.split(b",", 2)
        return item, int(version), int(length)
    if kind == b"delete":
        return True
    if kind == b"emit":
        last, cancel = rest.split(b",")
        return Emitted(int(last), cancel == b"1")
    numbers = tuple(int(part) for part in rest.split(b","))
    return numbers[0] if kind == b"put" else numbers


async def _roll_back(conn: psycopg.AsyncConnection[Any]) -> None:
    """End the write's transaction, whatever state it is in (the connection then goes back to the pool)."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE and not conn.closed:
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")


async def keep(pool: psycopg_pool.AsyncConnectionPool, memo: Memo, answer: Answer, now: int) -> None:
    async with aconnection(pool) as conn:
        await conn.execute(KEEP, (memo.caller, memo.key, memo.fingerprint, answer.status, answer.body, now))


async def purge(pool: psycopg_pool.AsyncConnectionPool, before: int, limit: int) -> int:
    async with aconnection(pool) as conn:
        return (await conn.execute(PURGE, (before, limit))).rowcount
