"""The lease facet on SQLite: a lease row with a fencing counter, for processes on one machine.

Leases live in ``session_store_leases (id, fence, expires_at)``: a grant is one upsert that bumps
``fence`` only when the row is free or expired (``RETURNING fence``), so the counter only grows and
survives release. Every fenced write runs inside one ``BEGIN IMMEDIATE`` transaction (the
database's single write lock) as "the lease row still has my fence" followed by the write: no other
writer can come between the check and the write. Writes go through ``SqliteFile.awrite`` (one
writer thread per process, group commit, ``synchronous=FULL``); reads run on a WAL snapshot.
Lease times are this machine's wall clock in ms, which every process sharing the file agrees on.
"""

from __future__ import annotations

import sqlite3

from ...clock import now_ms
from ..base import LeaseFacet
from ..records import Blob
from .db import SqliteFile

COMPONENT = "session_store"
LEASES = "session_store_leases"
TABLES = {"sessions": "session_store_states", "tokens": "session_store_tokens"}

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
]

SQL_LEASE_HELD = f"SELECT 1 FROM {LEASES} WHERE id = ? AND expires_at > ?"
SQL_ACQUIRE = (
    f"INSERT INTO {LEASES} (id, fence, expires_at) VALUES (?, 1, ?) "
    f"ON CONFLICT(id) DO UPDATE SET fence = fence + 1, expires_at = excluded.expires_at "
    f"WHERE {LEASES}.expires_at <= ? RETURNING fence"
)
SQL_RENEW = f"UPDATE {LEASES} SET expires_at = ? WHERE id = ? AND fence = ?"
SQL_RELEASE = f"UPDATE {LEASES} SET expires_at = 0 WHERE id = ? AND fence = ?"
SQL_FENCE_OK = f"SELECT 1 FROM {LEASES} WHERE id = ? AND fence = ?"


def _sql(table: str) -> dict[str, str]:
    return {
        "read": f"SELECT data, expires_at, pinned FROM {table} WHERE id = ?",
        "write": (
            f"INSERT INTO {table} (id, data, expires_at, pinned) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
            "SET data = excluded.data, expires_at = excluded.expires_at, pinned = excluded.pinned"
        ),
        "remove": f"DELETE FROM {table} WHERE id = ?",
        "touch": f"UPDATE {table} SET expires_at = ? WHERE id = ?",
    }


class SqliteLeases(LeaseFacet):
    def __init__(self, db: SqliteFile, space: str = "sessions") -> None:
        self._db = db
        self._db.migrate(COMPONENT, STEPS)
        self._sql = _sql(TABLES[space])

    async def acquire(self, id: str, ttl_ms: int) -> int | None:
        now = now_ms()
        if await self._db.aread(lambda c: c.execute(SQL_LEASE_HELD, (id, now)).fetchone()) is not None:
            return None  # held: answer from a snapshot without taking the write lock

        def grant(conn: sqlite3.Connection) -> int | None:
            stamp = now_ms()
            rows = conn.execute(SQL_ACQUIRE, (id, stamp + ttl_ms, stamp)).fetchall()
            return int(rows[0][0]) if rows else None

        return await self._db.awrite(grant)

    async def renew(self, id: str, token: int, ttl_ms: int) -> bool:
        return await self._db.awrite(lambda c: c.execute(SQL_RENEW, (now_ms() + ttl_ms, id, token)).rowcount == 1)

    async def release(self, id: str, token: int) -> None:
        await self._db.awrite(lambda c: c.execute(SQL_RELEASE, (id, token)))

    async def read(self, id: str) -> Blob | None:
        row = await self._db.aread(lambda c: c.execute(self._sql["read"], (id,)).fetchone())
        return None if row is None else Blob(bytes(row[0]), row[1], bool(row[2]))

    async def write(self, id: str, stored: Blob, token: int | None) -> bool:
        args = (id, stored.data, stored.expires_at, int(stored.pinned))
        return await self._fenced(id, token, self._sql["write"], args)

    async def remove(self, id: str, token: int | None) -> bool:
        return await self._fenced(id, token, self._sql["remove"], (id,))

    async def touch(self, id: str, expires_at: int, token: int | None) -> bool:
        return await self._fenced(id, token, self._sql["touch"], (expires_at, id))

    async def _fenced(self, id: str, token: int | None, sql: str, args: tuple[object, ...]) -> bool:
        """Check the fence and write, both inside one BEGIN IMMEDIATE transaction."""

        def step(conn: sqlite3.Connection) -> bool:
            if token is not None and conn.execute(SQL_FENCE_OK, (id, token)).fetchone() is None:
                return False
            conn.execute(sql, args)
            return True

        return await self._db.awrite(step)
