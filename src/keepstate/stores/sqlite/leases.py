"""The lease facet on SQLite: a lease row with a fencing counter, for processes on one machine.

Leases live in ``session_store_leases (id, fence, expires_at)``: a grant is one upsert that bumps
``fence`` only when the row is free or expired (``RETURNING fence``), so the counter only grows and
survives release. A new row's fence starts at the clock's milliseconds, not 1: a purge may delete a
row free for a day, and its id's next grant must still be above every token that row ever gave.
Every fenced write runs inside one ``BEGIN IMMEDIATE`` transaction (the database's single write
lock) as "the lease row still has my fence" followed by the write: no other writer can come between
the check and the write. Writes go through ``SqliteFile.awrite`` (one writer thread per process,
group commit, ``synchronous=FULL``); reads run on a WAL snapshot. Lease times are this machine's
wall clock in ms, which every process sharing the file agrees on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any

from ...clock import now_ms
from ..base import LeaseFacet, blob_records
from ..records import Blob, BlobRecord
from .db import SqliteFile

COMPONENT = "session_store"
LEASES = "session_store_leases"
TABLES = {"sessions": "session_store_states", "tokens": "session_store_tokens"}
PAGE = 500

STEPS = [
    f"""
    CREATE TABLE {TABLES["sessions"]} (
        id TEXT PRIMARY KEY, data BLOB NOT NULL, expires_at INTEGER, pinned INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE {LEASES} (id TEXT PRIMARY KEY, fence INTEGER NOT NULL, expires_at INTEGER NOT NULL);
    CREATE TABLE {TABLES["tokens"]} (
        id TEXT PRIMARY KEY, data BLOB NOT NULL, expires_at INTEGER, pinned INTEGER NOT NULL DEFAULT 0
    );
    """,
    # blob versions, and what the purge looks for
    f"""
    ALTER TABLE {TABLES["sessions"]} ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE {TABLES["tokens"]} ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
    CREATE INDEX {TABLES["sessions"]}_expiry ON {TABLES["sessions"]} (expires_at) WHERE pinned = 0;
    CREATE INDEX {TABLES["tokens"]}_expiry ON {TABLES["tokens"]} (expires_at) WHERE pinned = 0;
    CREATE INDEX {LEASES}_expiry ON {LEASES} (expires_at);
    """,
]

SQL_LEASE_HELD = f"SELECT 1 FROM {LEASES} WHERE id = ? AND expires_at > ?"
SQL_ACQUIRE = (
    f"INSERT INTO {LEASES} (id, fence, expires_at) VALUES (?, ?, ?) "
    f"ON CONFLICT(id) DO UPDATE SET fence = fence + 1, expires_at = excluded.expires_at "
    f"WHERE {LEASES}.expires_at <= ? RETURNING fence"
)
SQL_RENEW = f"UPDATE {LEASES} SET expires_at = ? WHERE id = ? AND fence = ?"
SQL_RELEASE = f"UPDATE {LEASES} SET expires_at = ? WHERE id = ? AND fence = ? AND expires_at > ?"
SQL_FENCE_OK = f"SELECT 1 FROM {LEASES} WHERE id = ? AND fence = ?"
_FREE_LEASES = f"FROM {LEASES} l WHERE expires_at < ? " + "".join(
    f"AND NOT EXISTS (SELECT 1 FROM {table} b WHERE b.id = l.id) " for table in TABLES.values()
)
SQL_PURGE_LEASES = f"DELETE FROM {LEASES} WHERE id IN (SELECT id {_FREE_LEASES} LIMIT ?)"
SQL_COUNT_LEASES = f"SELECT count(*) {_FREE_LEASES}"


def _sql(table: str) -> dict[str, str]:
    columns = "data, expires_at, pinned, version"
    return {
        "read": f"SELECT {columns} FROM {table} WHERE id = ?",
        "write": (
            f"INSERT INTO {table} (id, data, expires_at, pinned, version) VALUES (?, ?, ?, ?, 1) "
            "ON CONFLICT(id) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at, "
            f"pinned = excluded.pinned, version = {table}.version + 1 RETURNING version"
        ),
        "remove": f"DELETE FROM {table} WHERE id = ?",
        "touch": f"UPDATE {table} SET expires_at = ? WHERE id = ?",
        "page": f"SELECT id, {columns} FROM {table} WHERE id > ? ORDER BY id LIMIT {PAGE}",
        "restore": (
            f"INSERT INTO {table} (id, data, expires_at, pinned, version) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at, "
            "pinned = excluded.pinned, version = excluded.version"
        ),
        "purge": (
            f"DELETE FROM {table} WHERE id IN "
            f"(SELECT id FROM {table} WHERE pinned = 0 AND expires_at < ? ORDER BY expires_at LIMIT ?)"
        ),
        "count": f"SELECT count(*) FROM {table} WHERE pinned = 0 AND expires_at < ?",
    }


def _blob(row: Sequence[Any]) -> Blob:
    data, expires_at, pinned, version = row
    return Blob(bytes(data), expires_at, bool(pinned), int(version))


class SqliteLeases(LeaseFacet):
    def __init__(self, db: SqliteFile, space: str = "sessions") -> None:
        self._db = db
        self._db.migrate(COMPONENT, STEPS)
        self._sql = _sql(TABLES[space])
        self._leases = space == "sessions"  # the space whose purge takes free lease rows too

    async def acquire(self, id: str, ttl_ms: int) -> int | None:
        now = now_ms()
        if await self._db.aread(lambda c: c.execute(SQL_LEASE_HELD, (id, now)).fetchone()) is not None:
            return None  # held: answer from a snapshot without taking the write lock

        def grant(conn: sqlite3.Connection) -> int | None:
            stamp = now_ms()
            rows = conn.execute(SQL_ACQUIRE, (id, stamp, stamp + ttl_ms, stamp)).fetchall()
            return int(rows[0][0]) if rows else None

        return await self._db.awrite(grant)

    async def renew(self, id: str, token: int, ttl_ms: int) -> bool:
        return await self._db.awrite(lambda c: c.execute(SQL_RENEW, (now_ms() + ttl_ms, id, token)).rowcount == 1)

    async def release(self, id: str, token: int) -> None:
        """Free the lease, noting when (a purge takes rows free for long enough)."""

        def free(conn: sqlite3.Connection) -> None:
            now = now_ms()
            conn.execute(SQL_RELEASE, (now, id, token, now))

        await self._db.awrite(free)

    async def read(self, id: str) -> Blob | None:
        row = await self._db.aread(lambda c: c.execute(self._sql["read"], (id,)).fetchone())
        return None if row is None else _blob(row)

    async def write(self, id: str, stored: Blob, token: int | None) -> int | None:
        def step(conn: sqlite3.Connection) -> int | None:
            if not _fence_ok(conn, id, token):
                return None
            args = (id, stored.data, stored.expires_at, int(stored.pinned))
            return int(conn.execute(self._sql["write"], args).fetchone()[0])

        return await self._db.awrite(step)

    async def remove(self, id: str, token: int | None) -> bool:
        return await self._fenced(id, token, self._sql["remove"], (id,))

    async def touch(self, id: str, expires_at: int, token: int | None) -> bool:
        return await self._fenced(id, token, self._sql["touch"], (expires_at, id))

    def records(self) -> AsyncIterator[BlobRecord]:
        sql = self._sql["page"]
        return blob_records(lambda after: self._db.aread(partial(_page, sql=sql, after=after)), _blob, PAGE)

    async def restore(self, record: BlobRecord) -> None:
        blob = record.blob
        args = (record.id, blob.data, blob.expires_at, int(blob.pinned), blob.version)
        await self._db.awrite(lambda c: c.execute(self._sql["restore"], args))

    async def purge(self, before: int, limit: int) -> int:
        def step(conn: sqlite3.Connection) -> int:
            blobs = conn.execute(self._sql["purge"], (before, limit)).rowcount
            return int(blobs + (conn.execute(SQL_PURGE_LEASES, (before, limit)).rowcount if self._leases else 0))

        return await self._db.awrite(step)

    async def count_purgeable(self, before: int) -> int:
        def count(conn: sqlite3.Connection) -> int:
            blobs = conn.execute(self._sql["count"], (before,)).fetchone()[0]
            return int(blobs + (conn.execute(SQL_COUNT_LEASES, (before,)).fetchone()[0] if self._leases else 0))

        return await self._db.aread(count)

    async def _fenced(self, id: str, token: int | None, sql: str, args: tuple[object, ...]) -> bool:
        """Check the fence and write, both inside one BEGIN IMMEDIATE transaction."""

        def step(conn: sqlite3.Connection) -> bool:
            if not _fence_ok(conn, id, token):
                return False
            conn.execute(sql, args)
            return True

        return await self._db.awrite(step)


def _page(conn: sqlite3.Connection, sql: str, after: str) -> list[Any]:
    return conn.execute(sql, (after,)).fetchall()


def _fence_ok(conn: sqlite3.Connection, id: str, token: int | None) -> bool:
    return token is None or conn.execute(SQL_FENCE_OK, (id, token)).fetchone() is not None
