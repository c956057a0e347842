"""Run event logs on PostgreSQL (``RunEventLog``): many servers writing one run's log, and hearing of it.

An emit (one call of ``ks_emit``, ``sql.events.PG_PACKED_STEP``: its events one row) takes the run's head
row first (``FOR UPDATE``), the lock a status change's trigger takes too, and only then checks, in a
statement of its own (a fresh snapshot under READ COMMITTED), that its invocation still runs: a finish
that committed first is seen and the emit refused; one that comes after waits for the emit and writes its
status event after the emit's.
So two writers never take one ``seq``, events commit in ``seq`` order, and nothing follows the event that
ends a run. One statement, one round trip.

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
from ..sql import event_rows
from ..sql import events as sql
from . import db
from .platform_sql import pg
from .state_once import first, twin

try:
    import psycopg
    import psycopg_pool
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

log = logging.getLogger("keepstate.events")

EMIT = (
    "SELECT outcome, last, cancel FROM ks_emit(%(inv)s, %(token)s, %(now)s, %(cap)s, %(count)s::int, %(type)s, "
    "%(types)s::text, %(sizes)s::text, %(data)s::bytea)"
)
"""``ks_emit`` (``sql.events.PG_PACKED_STEP``): a whole emit in one statement, its events one row
(``sql/event_rows.py``)."""
EMIT_ONCE = twin(EMIT, "convert_to('emit:' || w.last || ',' || w.cancel::int, 'UTF8')", "w.outcome = 'ok'")
"""A keyed emit: the same statement keeping its answer (``state_once``), only when the events went in."""
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
        packed = event_rows.packed(events)
        params = {"inv": invocation_id, "token": token_hash, "now": now, "cap": cap, "count": packed.count}
        params.update(type=packed.type, types=packed.types, sizes=packed.sizes, data=packed.data)
        async with db.aconnection(self.pool) as conn:
            row = await first(conn, EMIT, params, EMIT_ONCE)
        assert row is not None
        outcome, last, cancel = row
        if outcome == "full":
            check_event_cap(int(last), len(events), cap)  # raises TooLarge
        return Emitted(int(last), bool(cancel)) if outcome == "ok" else None

    async def read(self, run_id: str, after: int, limit: int) -> list[StoredEvent]:
        async with db.aconnection(self.pool) as conn:
            rows = await (await conn.execute(pg(sql.READ), (run_id, after, limit))).fetchall()
        return event_rows.unpacked(rows, after, limit)

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
