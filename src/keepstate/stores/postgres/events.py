"""Run event logs on PostgreSQL (``RunEventLog``): many servers writing one run's log, and hearing of it.

An emit takes the run's head row first (``UPDATE ks_event_heads``), the lock a status change's trigger
takes too, and only then checks, in a statement of its own (a fresh snapshot under READ COMMITTED), that
its invocation still runs: a finish that committed first is seen and the emit refused; one that comes
after waits for the emit and writes its status event after the emit's. So two writers never take one
``seq``, events commit in ``seq`` order, and nothing follows the event that ends a run.

Following: a trigger notifies channel ``sql.events.NOTIFY_CHANNEL`` with ``RUN_ID SCHEMA`` when events
commit (a transaction's notifications go out at its commit, never before). Each server process keeps one
connection of its own that LISTENs there and hands the run ids of its schema to ``sink.wake``; lost, it
connects again (with a back-off) and then wakes every waiter, which reads again: whatever committed while
nobody listened is read then, so none is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..base import EventSink, RunEventLog
from ..records import Emitted, NewEvent, StoredEvent, check_event_cap
from ..sql import events as sql
from . import db
from .platform_sql import pg

try:
    import psycopg
    import psycopg_pool
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

log = logging.getLogger("keepstate.events")

BUMP_HEAD = (
    "UPDATE ks_event_heads SET last_seq = last_seq + %s "
    "WHERE run_id = (SELECT run_id FROM ks_invocations WHERE id = %s AND token_hash = %s) RETURNING run_id, last_seq"
)
"""The token's run's head, bumped by the emit's count and so locked: the first of an emit's two statements."""
INSERT_IF_LIVE = (
    f"WITH live AS ({pg(sql.LIVE_INVOCATION_RUN)}), "
    "written AS (INSERT INTO ks_run_events (run_id, seq, type, data, at) SELECT %s, e.seq, e.type, e.data, %s "
    "FROM unnest(%s::bigint[], %s::text[], %s::bytea[]) AS e(seq, type, data) WHERE EXISTS (SELECT 1 FROM live) "
    "RETURNING 1) SELECT cancel_requested FROM live"
)
"""The second: a fresh snapshot (taken after the head's lock) judges the invocation live and, if it is, writes
the whole emit; no row when it is not (the caller rolls the bump back). One notification, one round trip."""
SCHEMA_OF_EVENTS = (
    "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.oid = 'ks_run_events'::regclass"
)
LISTENER_NAME = "keepstate-run-events"
"""The ``application_name`` of a process's listening connection, with its process id after a space (what
``pg_stat_activity`` shows: which server listens where)."""
RECONNECT_FIRST_S, RECONNECT_MAX_S = 0.1, 5.0


class PostgresEventLog(RunEventLog):
    def __init__(self, pool: psycopg_pool.AsyncConnectionPool) -> None:
        self.pool = pool
        self.pause: Callable[[float], Awaitable[object]] = asyncio.sleep
        """How the follow waits before it connects again (a test holds it there)."""

    async def emit(
        self, invocation_id: str, token_hash: str, events: Sequence[NewEvent], now: int, cap: int
    ) -> Emitted | None:
        emitted: Emitted | None = None
        async with db.aconnection(self.pool) as conn, conn.transaction():
            emitted = await _emit(conn, invocation_id, token_hash, events, now, cap)
            if emitted is None:
                raise psycopg.Rollback()  # the head's bump goes too
        return emitted

    async def read(self, run_id: str, after: int, limit: int) -> list[StoredEvent]:
        async with db.aconnection(self.pool) as conn:
            rows = await (await conn.execute(pg(sql.READ), (run_id, after, limit))).fetchall()
        return [StoredEvent(seq, kind, bytes(data), at) for seq, kind, data, at in rows]

    async def follow(self, sink: EventSink) -> None:
        first, delay = True, RECONNECT_FIRST_S
        while True:
            try:
                async with await self._listener() as conn:
                    schema = (await (await conn.execute(SCHEMA_OF_EVENTS)).fetchone() or ("",))[0]
                    await conn.execute(f"LISTEN {sql.NOTIFY_CHANNEL}")
                    if first:
                        sink.following()
                    else:
                        sink.wake(None)
                    first, delay = False, RECONNECT_FIRST_S
                    async for note in conn.notifies():
                        run_id, _, where = note.payload.partition(" ")
                        if where == schema:
                            sink.wake((run_id,))
            except psycopg.Error as error:
                if first:
                    with db.translate_errors():
                        raise
                log.warning("run events: the listening connection was lost (%s); connecting again", error)
            await self.pause(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)

    async def _listener(self) -> psycopg.AsyncConnection[Any]:
        """A connection of its own (never the pool's: it listens for as long as the server runs)."""
        assert isinstance(self.pool.conninfo, str)  # db.open_async_pool gives it the URL
        return await db.connect_alone(self.pool.conninfo, f"{LISTENER_NAME} {os.getpid()}")


async def _emit(
    conn: psycopg.AsyncConnection[Any],
    invocation_id: str,
    token_hash: str,
    events: Sequence[NewEvent],
    now: int,
    cap: int,
) -> Emitted | None:
    """The head locked first, then the invocation checked in a fresh statement (see the module): two
    statements in the caller's transaction."""
    head = await (await conn.execute(BUMP_HEAD, (len(events), invocation_id, token_hash))).fetchone()
    if head is None:
        return None
    run_id, last = head[0], int(head[1])
    check_event_cap(last - len(events), len(events), cap)
    seqs = list(range(last - len(events) + 1, last + 1))
    kinds, data = [kind for kind, _ in events], [item for _, item in events]
    live = await (
        await conn.execute(INSERT_IF_LIVE, (invocation_id, token_hash, now, run_id, now, seqs, kinds, data))
    ).fetchone()
    return None if live is None else Emitted(last, bool(live[0]))
