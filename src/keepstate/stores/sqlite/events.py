"""Run event logs on SQLite (``RunEventLog``): emits on the file's one writer, reads on the caller's thread.

The file has one writer at a time, so an emit's few statements (the invocation's check, the head, the
events' one row, ``sql/event_rows.py``) are atomic in its ``BEGIN IMMEDIATE`` transaction, and events
commit in ``seq`` order.

Following: servers sharing the file learn of each other's events with one cheap read per process every
``POLL_S`` while a stream waits (never one per stream): the file's change cursor (``sqlite_sequence``'s
count for ``ks_run_events``, which AUTOINCREMENT never gives back), then the runs of the rows past the
last one seen. A local commit looks at once (``written``). Rows that went before they were seen (a
session deleted with its runs' events), or too many to list, wake every waiter instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Sequence
from functools import partial

from ...errors import Unavailable
from ..base import EventSink, RunEventLog
from ..records import Emitted, NewEvent, StoredEvent, check_event_cap
from ..sql import event_rows
from ..sql import events as sql
from .db import SqliteFile

log = logging.getLogger("keepstate.events")

POLL_S = 0.25
"""How often a process with streams open looks for other processes' events."""
LIST_AT_MOST = 1000
"""Past this many new rows, every waiter reads again rather than the rows being listed."""
CURSOR = "SELECT seq FROM sqlite_sequence WHERE name = 'ks_run_events'"
SINCE = "SELECT run_id FROM ks_run_events WHERE id > ? AND id <= ?"

Woken = set[str] | None


class SqliteEventLog(RunEventLog):
    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        self._poked: asyncio.Event | None = None

    async def emit(
        self, invocation_id: str, token_hash: str, events: Sequence[NewEvent], now: int, cap: int
    ) -> Emitted | None:
        def write(conn: sqlite3.Connection) -> Emitted | None:
            live = conn.execute(sql.LIVE_INVOCATION_RUN, (invocation_id, token_hash, now)).fetchone()
            if live is None:
                return None
            run_id, cancel = live
            last = conn.execute(sql.LAST_SEQ, (run_id,)).fetchone()[0]
            check_event_cap(last, len(events), cap)
            conn.execute(sql.ADD_SEQ, (len(events), run_id)).fetchone()
            row = event_rows.packed(events)
            conn.execute(sql.INSERT_EVENTS, (run_id, last + row.count, row.type, row.data, now, row.sizes, row.types))
            return Emitted(last + row.count, bool(cancel))

        return await self.db.awrite(write)

    async def read(self, run_id: str, after: int, limit: int) -> list[StoredEvent]:
        rows = await self.db.aread(lambda conn: conn.execute(sql.READ, (run_id, after, limit)).fetchall())
        return event_rows.unpacked(rows, after, limit)

    async def follow(self, sink: EventSink) -> None:
        poked = self._poked = asyncio.Event()
        seen = await self.db.aread(lambda conn: cursor(conn))
        sink.following()
        while True:
            await sink.watched()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(poked.wait(), POLL_S)
            poked.clear()
            try:
                seen, woken = await self.db.aread(partial(changes, seen=seen))
            except Unavailable as error:  # the file is busy or gone for now: the next look covers this one
                log.warning("run events: cannot look for new events now (%s)", error)
                continue
            if woken is None or woken:
                sink.wake(woken)

    def written(self) -> None:
        if self._poked is not None:
            self._poked.set()


def cursor(conn: sqlite3.Connection) -> int:
    """The file's change cursor: the id of the last event ever written (0: none yet)."""
    row = conn.execute(CURSOR).fetchone()
    return 0 if row is None else int(row[0])


def changes(conn: sqlite3.Connection, seen: int) -> tuple[int, Woken]:
    """The cursor now, and the runs with events past ``seen`` (None: every run may have, see the module)."""
    now = cursor(conn)
    if now == seen:
        return now, set()
    if now < seen or now - seen > LIST_AT_MOST:
        return now, None
    runs = [row[0] for row in conn.execute(SINCE, (seen, now))]
    return now, (set(runs) if len(runs) == now - seen else None)
