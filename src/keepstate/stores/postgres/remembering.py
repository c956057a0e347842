"""Idempotent writes on PostgreSQL: one transaction holds the key's claim, the write and its answer.

The claim is a row with no answer yet, inserted first: a repeat of the key (on this server or any
other) waits on that row until the first write commits (then finds its answer) or rolls back (then
claims the key itself). ``work`` runs on the claim's connection (``db.HELD``), so every statement of
the write, in whichever facet, is part of that transaction; its own ``transaction()`` blocks become
savepoints. Waiting is bounded by ``lock_timeout``: ``IdempotencyInFlight`` after ``IN_FLIGHT_S``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from ...clock import now_ms
from ...errors import IdempotencyInFlight
from ..remembered import IN_FLIGHT_S, Answer, Memo, Remembered
from ..sql import remembered as sql
from .db import HELD, aconnection
from .platform_sql import pg

T = TypeVar("T")
RECALL, KEEP, CLAIM, SETTLE, PURGE, COUNT_OLD = (
    pg(text) for text in (sql.RECALL, sql.KEEP, sql.CLAIM, sql.SETTLE, sql.PURGE, sql.COUNT_OLD)
)
WAIT_AT_MOST = f"SET LOCAL lock_timeout = '{int(IN_FLIGHT_S * 1000)}ms'"
WAIT_AS_USUAL = "SET LOCAL lock_timeout = DEFAULT"


async def recall(conn: psycopg.AsyncConnection[Any], caller: str, key: str) -> Remembered | None:
    row = await (await conn.execute(RECALL, (caller, key))).fetchone()
    return None if row is None else Remembered(bytes(row[0]), Answer(int(row[1]), bytes(row[2])))


async def remember(
    pool: psycopg_pool.AsyncConnectionPool, memo: Memo, work: Callable[[], Awaitable[T]]
) -> T | Remembered:
    async with aconnection(pool) as conn, conn.transaction():
        try:
            await conn.execute(WAIT_AT_MOST)
            claimed = await (await conn.execute(CLAIM, (memo.caller, memo.key, memo.fingerprint, now_ms()))).fetchone()
        except psycopg.errors.LockNotAvailable:
            raise IdempotencyInFlight(
                f"a write with idempotency key {memo.key!r} is still being applied: try again later"
            ) from None
        if claimed is None:
            found = await recall(conn, memo.caller, memo.key)
            assert found is not None, "a claim is only seen once its write committed its answer"
            return found
        await conn.execute(WAIT_AS_USUAL)
        token = HELD.set((pool, conn))
        try:
            result = await work()
        finally:
            HELD.reset(token)
        answer = memo.render(result)
        if answer is None:
            raise AssertionError("an idempotent write returned without an answer")
        await conn.execute(SETTLE, (answer.status, answer.body, memo.caller, memo.key))
        return result


async def keep(pool: psycopg_pool.AsyncConnectionPool, memo: Memo, answer: Answer, now: int) -> None:
    async with aconnection(pool) as conn:
        await conn.execute(KEEP, (memo.caller, memo.key, memo.fingerprint, answer.status, answer.body, now))


async def purge(pool: psycopg_pool.AsyncConnectionPool, before: int, limit: int) -> int:
    async with aconnection(pool) as conn:
        return (await conn.execute(PURGE, (before, limit))).rowcount
