"""The lease facet on PostgreSQL: a lease row with a fencing counter, for many machines.

Why a lease row and not advisory locks: a session advisory lock belongs to one *connection*, so
holding it across the awaited work would pin a pooled connection per open session and tie the
lease to TCP liveness (a half-dead connection keeps the lock; a pooler reset silently drops it),
and it has no counter to fence a stale holder's late write. A row ``(id, fence, expires_at)``
needs no connection between statements, expires by the *database's* clock (one clock for every
machine), and its ``fence`` only grows.

- grant: one upsert that bumps ``fence`` only when the row is expired or released (``RETURNING``);
  concurrent grants serialise on the row lock and re-check, so exactly one wins. A new row's fence
  starts at the database clock's milliseconds, not 1: a purge may delete a row free for a day, and
  its id's next grant must still be above every token that row ever gave.
- fenced write: one statement ``WITH lease AS (SELECT ... WHERE fence = token FOR SHARE)`` + the
  write conditional on that row. ``FOR SHARE`` makes a concurrent grant wait for the write (or the
  write re-check the bumped fence and do nothing), so a write is never accepted after a newer grant.
- autocommit: no transaction or lock outlives a statement; nothing is held across awaited work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ..base import LeaseFacet, blob_records
from ..records import Blob, BlobRecord
from .db import aconnection

try:
    import psycopg_pool
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

COMPONENT = "session_store"
LEASES = "session_store_leases"
TABLES = {"sessions": "session_store_states", "tokens": "session_store_tokens"}

STEPS = [
    f"""
    CREATE TABLE {TABLES["sessions"]} (
        id TEXT PRIMARY KEY, data BYTEA NOT NULL, expires_at BIGINT, pinned BOOLEAN NOT NULL DEFAULT false
    );
    CREATE TABLE {LEASES} (id TEXT PRIMARY KEY, fence BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL);
    CREATE TABLE {TABLES["tokens"]} (
        id TEXT PRIMARY KEY, data BYTEA NOT NULL, expires_at BIGINT, pinned BOOLEAN NOT NULL DEFAULT false
    );
    """,
    # blob versions, and what the purge looks for
    f"""
    ALTER TABLE {TABLES["sessions"]} ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
    ALTER TABLE {TABLES["tokens"]} ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
    CREATE INDEX {TABLES["sessions"]}_expiry ON {TABLES["sessions"]} (expires_at) WHERE NOT pinned;
    CREATE INDEX {TABLES["tokens"]}_expiry ON {TABLES["tokens"]} (expires_at) WHERE NOT pinned;
    CREATE INDEX {LEASES}_expiry ON {LEASES} (expires_at);
    """,
]
PAGE = 500

_TTL = "clock_timestamp() + %(ttl)s::bigint * interval '1 millisecond'"
_CLOCK_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
SQL_ACQUIRE = (
    f"INSERT INTO {LEASES} (id, fence, expires_at) VALUES (%(id)s, {_CLOCK_MS}, {_TTL}) "
    f"ON CONFLICT (id) DO UPDATE SET fence = {LEASES}.fence + 1, expires_at = excluded.expires_at "
    f"WHERE {LEASES}.expires_at <= clock_timestamp() RETURNING fence"
)
SQL_RENEW = f"UPDATE {LEASES} SET expires_at = {_TTL} WHERE id = %(id)s AND fence = %(token)s RETURNING 1"
SQL_RELEASE = (
    f"UPDATE {LEASES} SET expires_at = clock_timestamp() "
    "WHERE id = %(id)s AND fence = %(token)s AND expires_at > clock_timestamp()"
)
_FREE_LEASES = f"FROM {LEASES} l WHERE expires_at < to_timestamp(%(before)s / 1000.0) " + "".join(
    f"AND NOT EXISTS (SELECT 1 FROM {table} b WHERE b.id = l.id) " for table in TABLES.values()
)
SQL_PURGE_LEASES = f"DELETE FROM {LEASES} WHERE id IN (SELECT id {_FREE_LEASES} LIMIT %(limit)s)"
SQL_COUNT_LEASES = f"SELECT count(*) {_FREE_LEASES}"
_LEASE_CTE = f"lease AS (SELECT 1 FROM {LEASES} WHERE id = %(id)s AND fence = %(token)s FOR SHARE)"


def statements(table: str) -> dict[str, str]:
    """Each write as a statement with a ``{cond}`` slot: ``true`` (plain) or the lease check (fenced)."""
    columns = "data, expires_at, pinned, version"
    return {
        "read": f"SELECT {columns} FROM {table} WHERE id = %(id)s",
        "write": (
            f"INSERT INTO {table} (id, data, expires_at, pinned, version) "
            "SELECT %(id)s::text, %(data)s::bytea, %(expires_at)s::bigint, %(pinned)s::boolean, 1 WHERE {cond} "
            "ON CONFLICT (id) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at, "
            f"pinned = excluded.pinned, version = {table}.version + 1 RETURNING version"
        ),
        "remove": f"DELETE FROM {table} WHERE id = %(id)s AND {{cond}}",
        "touch": f"UPDATE {table} SET expires_at = %(expires_at)s::bigint WHERE id = %(id)s AND {{cond}}",
        "page": f"SELECT id, {columns} FROM {table} WHERE id > %(after)s ORDER BY id LIMIT {PAGE}",
        "restore": (
            f"INSERT INTO {table} (id, data, expires_at, pinned, version) "
            "VALUES (%(id)s, %(data)s, %(expires_at)s, %(pinned)s, %(version)s) "
            "ON CONFLICT (id) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at, "
            "pinned = excluded.pinned, version = excluded.version"
        ),
        "purge": (
            f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} "
            "WHERE NOT pinned AND expires_at < %(before)s ORDER BY expires_at LIMIT %(limit)s)"
        ),
        "count": f"SELECT count(*) FROM {table} WHERE NOT pinned AND expires_at < %(before)s",
    }


def plain(statement: str) -> str:
    return statement.format(cond="true")


def fenced(statement: str) -> str:
    """The statement made conditional on the lease row's fence; yields 1 row when the fence held, with
    the written version when the statement returns one."""
    body = statement.format(cond="EXISTS (SELECT 1 FROM lease)")
    written = "(SELECT version FROM w)" if "RETURNING" in statement else "NULL"
    return f"WITH {_LEASE_CTE}, w AS ({body}) SELECT count(*), {written} FROM lease"


class PostgresLeases(LeaseFacet):
    poll_first = 0.01
    poll_max = 0.25

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool, space: str = "sessions") -> None:
        self._pool = pool
        self._sql = statements(TABLES[space])
        self._leases = space == "sessions"  # the space whose purge takes free lease rows too

    async def acquire(self, id: str, ttl_ms: int) -> int | None:
        row = await self._row(SQL_ACQUIRE, {"id": id, "ttl": ttl_ms})
        return None if row is None else int(row[0])

    async def renew(self, id: str, token: int, ttl_ms: int) -> bool:
        return await self._row(SQL_RENEW, {"id": id, "token": token, "ttl": ttl_ms}) is not None

    async def release(self, id: str, token: int) -> None:
        await self._row(SQL_RELEASE, {"id": id, "token": token})

    async def read(self, id: str) -> Blob | None:
        row = await self._row(self._sql["read"], {"id": id})
        return None if row is None else _blob(row)

    async def write(self, id: str, stored: Blob, token: int | None) -> int | None:
        params = {"id": id, "data": stored.data, "expires_at": stored.expires_at, "pinned": stored.pinned}
        if token is None:
            return int((await self._row(plain(self._sql["write"]), params))[0])
        row = await self._row(fenced(self._sql["write"]), {**params, "token": token})
        return int(row[1]) if row is not None and row[0] == 1 else None

    async def remove(self, id: str, token: int | None) -> bool:
        return await self._write("remove", {"id": id}, token)

    async def touch(self, id: str, expires_at: int, token: int | None) -> bool:
        return await self._write("touch", {"id": id, "expires_at": expires_at}, token)

    def records(self) -> AsyncIterator[BlobRecord]:
        return blob_records(self._page, _blob, PAGE)

    async def _page(self, after: str) -> list[Any]:
        async with aconnection(self._pool) as conn:
            return await (await conn.execute(self._sql["page"], {"after": after})).fetchall()

    async def restore(self, record: BlobRecord) -> None:
        blob = record.blob
        params = {
            "id": record.id,
            "data": blob.data,
            "expires_at": blob.expires_at,
            "pinned": blob.pinned,
            "version": blob.version,
        }
        await self._row(self._sql["restore"], params, fetch=False)

    async def purge(self, before: int, limit: int) -> int:
        params = {"before": before, "limit": limit}
        async with aconnection(self._pool) as conn:
            blobs = (await conn.execute(self._sql["purge"], params)).rowcount
            return blobs + ((await conn.execute(SQL_PURGE_LEASES, params)).rowcount if self._leases else 0)

    async def count_purgeable(self, before: int) -> int:
        blobs = (await self._row(self._sql["count"], {"before": before}))[0]
        return int(blobs + ((await self._row(SQL_COUNT_LEASES, {"before": before}))[0] if self._leases else 0))

    async def _write(self, kind: str, params: dict[str, Any], token: int | None) -> bool:
        if token is None:
            await self._row(plain(self._sql[kind]), params, fetch=False)
            return True
        row = await self._row(fenced(self._sql[kind]), {**params, "token": token})
        return row is not None and row[0] == 1

    async def _row(self, sql: str, params: dict[str, Any], fetch: bool = True) -> Any:
        """Run one autocommitted statement; its first row (or None)."""
        async with aconnection(self._pool) as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchone() if fetch and cursor.description else None


def _blob(row: Any) -> Blob:
    data, expires_at, pinned, version = row
    return Blob(bytes(data), expires_at, bool(pinned), int(version))
