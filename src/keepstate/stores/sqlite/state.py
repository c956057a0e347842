"""The state facet on SQLite: the embedded store, shared safely by several processes on one machine.

Layout. A small header row per key (``heads.py``) holds its version, kind, expiry and, for a
list, its JSON size, length and base index; a list's items live in bounded segment rows keyed by
the absolute index of their first item (``segments.py``), so appending, reading part of a list,
trimming and popping cost the segments they touch, never the list. A trigger drops a list's
segments when its key stops being a list (a put, delete, incr, patch or sweep). A partial index
on ``expires_at`` lets ``sweep`` find expired keys without a scan; reads never wait for it.

Every operation is one function of a connection (``kv.py``, ``segments.py``), run in one
``BEGIN IMMEDIATE`` transaction by the sync face, or group-committed by the writer thread of
``SqliteFile`` for the async face. Reads run in a read transaction: one snapshot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from functools import lru_cache, partial
from typing import Any

from ...clock import now_ms
from ..base import StateFacet, SyncStateFacet
from ..records import BatchOp, Entry, ListPage, StateRecord
from . import kv, segments
from .db import SqliteFile, version_guard
from .heads import COLUMNS, HEAD, head_of

COMPONENT = "state"
STEPS = [
    """
    CREATE TABLE keepstate_kv (
        ns TEXT NOT NULL,
        key TEXT NOT NULL,
        version INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('v', 'l', 'd')),
        value BLOB,
        size INTEGER NOT NULL DEFAULT 0,
        length INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (ns, key)
    );
    CREATE TABLE keepstate_kv_segments (
        ns TEXT NOT NULL,
        key TEXT NOT NULL,
        seg INTEGER NOT NULL,
        items TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (ns, key, seg)
    ) WITHOUT ROWID;
    CREATE TRIGGER keepstate_kv_unlist AFTER UPDATE OF kind ON keepstate_kv
    WHEN OLD.kind = 'l' AND NEW.kind != 'l'
    BEGIN
        DELETE FROM keepstate_kv_segments WHERE ns = OLD.ns AND key = OLD.key;
    END;
    """,
    # v2: expiry, trimming, and segments found by the absolute index of their first item, with each
    # item's size. The old segments (numbered 0, 1, ...) are copied with their running starts, and
    # no sizes: they are parsed when read, until a trim or pop rewrites them. A rowid table now: a
    # WITHOUT ROWID row keeps only ~1 KiB in its page and spills the rest to overflow pages, which
    # every append into the segment rewrote (5.4 pages per append against 2.2 now).
    """
    ALTER TABLE keepstate_kv ADD COLUMN base INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE keepstate_kv ADD COLUMN expires_at INTEGER;
    CREATE INDEX keepstate_kv_expiring ON keepstate_kv (expires_at) WHERE expires_at IS NOT NULL;
    CREATE TABLE keepstate_kv_parts (
        ns TEXT NOT NULL,
        key TEXT NOT NULL,
        start INTEGER NOT NULL,
        items TEXT NOT NULL,
        sizes TEXT,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (ns, key, start)
    );
    INSERT INTO keepstate_kv_parts (ns, key, start, items, sizes, bytes)
        SELECT ns, key, SUM(count) OVER (PARTITION BY ns, key ORDER BY seg) - count, items, NULL, bytes
        FROM (SELECT ns, key, seg, items, bytes, json_array_length('[' || items || ']') AS count
              FROM keepstate_kv_segments);
    DROP TRIGGER keepstate_kv_unlist;
    DROP TABLE keepstate_kv_segments;
    ALTER TABLE keepstate_kv_parts RENAME TO keepstate_kv_segments;
    CREATE TRIGGER keepstate_kv_unlist AFTER UPDATE OF kind ON keepstate_kv
    WHEN OLD.kind = 'l' AND NEW.kind != 'l'
    BEGIN
        DELETE FROM keepstate_kv_segments WHERE ns = OLD.ns AND key = OLD.key;
    END;
    """,
    # v3: no write takes a version past the highest one (``records.version_limit``)
    version_guard("keepstate_kv"),
]

drop = kv.drop
copy = kv.copy
keep_first = segments.keep_first


@lru_cache(maxsize=16)
def _header_with(scalar: str) -> str:
    """The header read joined to one scalar subquery: a row even when the key is absent."""
    columns = ", ".join(f"kv.{name.strip()}" for name in COLUMNS.split(","))
    return f"SELECT ({scalar}), {columns} FROM (SELECT 1) LEFT JOIN keepstate_kv AS kv ON kv.ns = ? AND kv.key = ?"


def read_with(db: SqliteFile, scalar: str, params: tuple[object, ...], ns: str, key: str) -> tuple[Any, Entry | None]:
    """One entry and ``scalar`` (a SELECT of one value from another table of the file, with
    ``params``) in one statement, so one snapshot: the server reads a run token's lease with the
    value its GET asks for. A list's segments take a second read. Plain, not async: the caller
    is already on the event loop's thread, where reads run, and a coroutine per call costs."""
    row = db.fetchone(_header_with(scalar), (*params, ns, key))
    return row[0], None if row[1] is None else _entry_of(db, row[1:], ns, key)


def _read_entry(db: SqliteFile, ns: str, key: str) -> Entry | None:
    """A plain value in one autocommit statement; a list's header and segments in one snapshot.

    The plain value is the common case and the server's hot read, hence no read transaction for it."""
    row = db.fetchone(HEAD, (ns, key))
    return None if row is None else _entry_of(db, row, ns, key)


def _entry_of(db: SqliteFile, row: Any, ns: str, key: str) -> Entry | None:
    head = head_of(row, now_ms())
    if not head.live:
        return None
    if head.value is None:  # a list: its header again and its segments, in one snapshot
        return db.read(partial(kv.get, ns=ns, key=key))
    return Entry(head.value, head.version, head.expires_at)


class SqliteState(SyncStateFacet):
    """The sync face: each write one ``BEGIN IMMEDIATE`` transaction on the caller's thread."""

    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        db.migrate(COMPONENT, STEPS)

    def get(self, ns: str, key: str) -> Entry | None:
        return _read_entry(self.db, ns, key)

    def write(self, op: BatchOp) -> Any:
        """A put is one upsert statement, atomic on its own: no explicit transaction needed."""
        if op.op == "put":
            return self.db.autocommit(partial(kv.apply, op=op))
        return self.db.write(partial(kv.apply, op=op))

    def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        return self.db.read(partial(kv.keys, ns=ns, prefix=prefix, after=after, limit=limit))

    def drop(self, ns: str) -> None:
        self.db.write(partial(kv.drop, ns=ns))

    def records(self) -> Iterator[StateRecord]:
        yield from self.db.read(kv.records)

    def restore(self, record: StateRecord) -> None:
        self.db.write(partial(kv.restore, record=record))

    def tail(self, ns: str, key: str, n: int) -> ListPage | None:
        return self.db.read(partial(segments.tail, ns=ns, key=key, n=n))

    def items(self, ns: str, key: str, start: int, limit: int) -> ListPage | None:
        return self.db.read(partial(segments.items, ns=ns, key=key, start=start, limit=limit))

    def batch(self, ops: Sequence[BatchOp]) -> list[Any]:
        return self.db.write(partial(kv.batch, ops=ops))

    def sweep(self, limit: int = 1000) -> int:
        return self.db.write(partial(kv.sweep, limit=limit))


class AsyncSqliteState(StateFacet):
    """The async face: writes group-committed by the file's writer thread, reads on the caller's."""

    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        db.migrate(COMPONENT, STEPS)

    async def get(self, ns: str, key: str) -> Entry | None:
        """Reads take microseconds on a WAL snapshot: done on the event loop's thread."""
        return _read_entry(self.db, ns, key)

    async def write(self, op: BatchOp) -> Any:
        return await self.db.awrite(partial(kv.apply, op=op))

    async def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        return await self.db.aread(partial(kv.keys, ns=ns, prefix=prefix, after=after, limit=limit))

    async def drop(self, ns: str) -> None:
        await self.db.awrite(partial(kv.drop, ns=ns))

    async def records(self) -> AsyncIterator[StateRecord]:
        for record in await self.db.aread(kv.records):
            yield record

    async def restore(self, record: StateRecord) -> None:
        await self.db.awrite(partial(kv.restore, record=record))

    async def tail(self, ns: str, key: str, n: int) -> ListPage | None:
        return await self.db.aread(partial(segments.tail, ns=ns, key=key, n=n))

    async def items(self, ns: str, key: str, start: int, limit: int) -> ListPage | None:
        return await self.db.aread(partial(segments.items, ns=ns, key=key, start=start, limit=limit))

    async def batch(self, ops: Sequence[BatchOp]) -> list[Any]:
        return await self.db.awrite(partial(kv.batch, ops=ops))

    async def sweep(self, limit: int = 1000) -> int:
        return await self.db.awrite(partial(kv.sweep, limit=limit))
