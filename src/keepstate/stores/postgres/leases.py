"""The lease facet on PostgreSQL: a lease row with a fencing counter, for many machines.

Why a lease row and not advisory locks: a session advisory lock belongs to one *connection*, so
holding it across the awaited work would pin a pooled connection per open session and tie the
lease to TCP liveness (a half-dead connection keeps the lock; a pooler reset silently drops it),
and it has no counter to fence a stale holder's late write. A row ``(id, fence, expires_at)``
needs no connection between statements, expires by the *database's* clock (one clock for every
machine), and its ``fence`` only grows.

- grant: one upsert that bumps ``fence`` only when the row is expired or released (``RETURNING``);
  concurrent grants serialise on the row lock and re-check, so exactly one wins.
- fenced write: one statement ``WITH lease AS (SELECT ... WHERE fence = token FOR SHARE)`` + the
  write conditional on that row. ``FOR SHARE`` makes a concurrent grant wait for the write (or the
  write re-check the bumped fence and do nothing), so a write is never accepted after a newer grant.
- autocommit: no transaction or lock outlives a statement; nothing is held across awaited work.
"""

from __future__ import annotations

from typing import Any

from ..base import LeaseFacet
from ..records import Blob
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
]

_TTL = "clock_timestamp() + %(ttl)s::bigint * interval '1 millisecond'"
SQL_ACQUIRE = (
    f"INSERT INTO {LEASES} (id, fence, expires_at) VALUES (%(id)s, 1, {_TTL}) "
    f"ON CONFLICT (id) DO UPDATE SET fence = {LEASES}.fence + 1, expires_at = excluded.expires_at "
    f"WHERE {LEASES}.expires_at <= clock_timestamp() RETURNING fence"
)
SQL_RENEW = f"UPDATE {LEASES} SET expires_at = {_TTL} WHERE id = %(id)s AND fence = %(token)s RETURNING 1"
SQL_RELEASE = f"UPDATE {LEASES} SET expires_at = to_timestamp(0) WHERE id = %(id)s AND fence = %(token)s"
_LEASE_CTE = f"lease AS (SELECT 1 FROM {LEASES} WHERE id = %(id)s AND fence = %(token)s FOR SHARE)"


def statements(table: str) -> dict[str, str]:
    """Each write as a statement with a ``{cond}`` slot: ``true`` (plain) or the lease check (fenced)."""
    return {
        "read": f"SELECT data, expires_at, pinned FROM {table} WHERE id = %(id)s",
        "write": (
            f"INSERT INTO {table} (id, data, expires_at, pinned) "
            "SELECT %(id)s::text, %(data)s::bytea, %(expires_at)s::bigint, %(pinned)s::boolean WHERE {cond} "
            "ON CONFLICT (id) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at, "
            "pinned = excluded.pinned"
        ),
        "remove": f"DELETE FROM {table} WHERE id = %(id)s AND {{cond}}",
        "touch": f"UPDATE {table} SET expires_at = %(expires_at)s::bigint WHERE id = %(id)s AND {{cond}}",
    }


def plain(statement: str) -> str:
    return statement.format(cond="true")


def fenced(statement: str) -> str:
    """The statement made conditional on the lease row's fence; yields 1 row when the fence held."""
    body = statement.format(cond="EXISTS (SELECT 1 FROM lease)")
    return f"WITH {_LEASE_CTE}, w AS ({body}) SELECT count(*) FROM lease"


class PostgresLeases(LeaseFacet):
    poll_first = 0.01
    poll_max = 0.25

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool, space: str = "sessions") -> None:
        self._pool = pool
        self._sql = statements(TABLES[space])

    async def acquire(self, id: str, ttl_ms: int) -> int | None:
        row = await self._row(SQL_ACQUIRE, {"id": id, "ttl": ttl_ms})
        return None if row is None else int(row[0])

    async def renew(self, id: str, token: int, ttl_ms: int) -> bool:
        return await self._row(SQL_RENEW, {"id": id, "token": token, "ttl": ttl_ms}) is not None

    async def release(self, id: str, token: int) -> None:
        await self._row(SQL_RELEASE, {"id": id, "token": token})

    async def read(self, id: str) -> Blob | None:
        row = await self._row(self._sql["read"], {"id": id})
        return None if row is None else Blob(bytes(row[0]), row[1], bool(row[2]))

    async def write(self, id: str, stored: Blob, token: int | None) -> bool:
        params = {"id": id, "data": stored.data, "expires_at": stored.expires_at, "pinned": stored.pinned}
        return await self._write("write", params, token)

    async def remove(self, id: str, token: int | None) -> bool:
        return await self._write("remove", {"id": id}, token)

    async def touch(self, id: str, expires_at: int, token: int | None) -> bool:
        return await self._write("touch", {"id": id, "expires_at": expires_at}, token)

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
