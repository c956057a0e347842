"""The state facet on PostgreSQL: many server processes on many machines sharing one database.

Layout: a header row per key in ``state_keys`` — version, kind (``v`` value, ``l`` appended list,
``d`` tombstone keeping the last version so versions never repeat), the canonical JSON bytes of a
``v`` value, and for a list its size in bytes, length, segment count and tail-segment bytes. An
appended list's items live in ``state_segments`` rows of comma-joined item JSON, appended into the
tail segment while it stays under ``SEGMENT_BYTES`` (small enough to stay in the row, not TOAST),
else in a new one; a read joins them server-side with ``string_agg``. Values are ``bytea``, never
``jsonb`` (reading 1 MiB of jsonb costs ~5x). Keys use the "C" collation so SQL order is byte order.

Every common write is ONE statement (one round trip, one WAL flush): ``INSERT ... ON CONFLICT DO
UPDATE ... WHERE <guard>`` — PostgreSQL re-checks the guard on the newest row version after waiting
for its lock, so the guard is a true compare-and-set under READ COMMITTED. When the guard does not
pass (a version conflict, a list to convert or remove, a list too large) the call takes a short
transaction that locks the header row (``FOR UPDATE``) and decides with a fresh snapshot. Invariant:
segment rows exist only while the header says ``l``, and only a holder of the header's row lock
changes them, so no statement ever sees or leaves half a list.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson

from ...errors import NotAList, TooLarge, VersionConflict
from ...values import MAX_VALUE_BYTES
from ..base import StateFacet
from ..records import Entry, StateRecord
from .db import aconnection

try:
    import psycopg
    import psycopg_pool
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

COMPONENT = "state"

SEGMENT_BYTES = 1800
"""Append into the tail segment while it stays under this (PostgreSQL TOASTs rows past ~2 KiB)."""
EXPORT_PAGE = 500

# ---------------------------------------------------------------- schema (append-only steps)

STEPS = (
    """
    CREATE TABLE state_keys (
        ns      TEXT COLLATE "C" NOT NULL,
        key     TEXT COLLATE "C" NOT NULL,
        version BIGINT NOT NULL,
        kind    TEXT NOT NULL CHECK (kind IN ('v', 'l', 'd')),
        data    BYTEA,
        size    INTEGER NOT NULL DEFAULT 0,
        length  INTEGER NOT NULL DEFAULT 0,
        segs    INTEGER NOT NULL DEFAULT 0,
        tail    INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (ns, key)
    );
    CREATE TABLE state_segments (
        ns    TEXT COLLATE "C" NOT NULL,
        key   TEXT COLLATE "C" NOT NULL,
        seg   INTEGER NOT NULL,
        items BYTEA NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (ns, key, seg)
    );
    """,
)

# ---------------------------------------------------------------- SQL text

_LIST_DATA = """CASE WHEN k.kind = 'l' THEN (
        SELECT string_agg(s.items, '\\x2c'::bytea ORDER BY s.seg) FROM state_segments s
        WHERE s.ns = k.ns AND s.key = k.key) END"""

GET = f"""SELECT k.version, k.kind, k.data, {_LIST_DATA} FROM state_keys k
    WHERE k.ns = %s AND k.key = %s AND k.kind <> 'd'"""

GET_WITH = f"""SELECT ({{scalar}}), k.version, k.kind, k.data, {_LIST_DATA} FROM (SELECT 1) AS one
    LEFT JOIN state_keys k ON k.ns = %s AND k.key = %s AND k.kind <> 'd'"""

_CLEAR = "data = NULL, size = 0, length = 0, segs = 0, tail = 0"

PUT_ANY = """INSERT INTO state_keys AS k (ns, key, version, kind, data) VALUES (%(ns)s, %(key)s, 1, 'v', %(data)s)
    ON CONFLICT (ns, key) DO UPDATE SET version = k.version + 1, kind = 'v', data = excluded.data
    WHERE k.kind <> 'l' RETURNING k.version"""

PUT_IF_ABSENT = """INSERT INTO state_keys AS k (ns, key, version, kind, data) VALUES (%(ns)s, %(key)s, 1, 'v', %(data)s)
    ON CONFLICT (ns, key) DO UPDATE SET version = k.version + 1, kind = 'v', data = excluded.data
    WHERE k.kind = 'd' RETURNING k.version"""

PUT_IF_VERSION = """UPDATE state_keys SET version = version + 1, data = %(data)s
    WHERE ns = %(ns)s AND key = %(key)s AND kind = 'v' AND version = %(if_version)s RETURNING version"""

DELETE_VALUE = f"""UPDATE state_keys SET kind = 'd', {_CLEAR}
    WHERE ns = %(ns)s AND key = %(key)s AND kind = 'v' AND (%(if_version)s::bigint IS NULL OR version = %(if_version)s)
    RETURNING version"""

# One statement appends to a list (or starts one over a tombstone or nothing); the size guard makes it
# return no row when the list would pass the limit, and a 'v' header makes it return none too.
_NEW_SIZE = "CASE WHEN k.kind = 'd' OR k.length = 0 THEN excluded.size ELSE k.size + excluded.size - 1 END"
_FRESH_TAIL = "k.kind = 'd' OR k.segs = 0 OR k.tail + 1 + excluded.tail > %(seg_bytes)s"
APPEND = f"""WITH h AS (
    INSERT INTO state_keys AS k (ns, key, version, kind, size, length, segs, tail)
    VALUES (%(ns)s, %(key)s, 1, 'l', %(size)s, %(count)s, 1, %(payload_bytes)s)
    ON CONFLICT (ns, key) DO UPDATE SET
        version = k.version + 1, kind = 'l', data = NULL, size = {_NEW_SIZE},
        length = CASE WHEN k.kind = 'd' THEN 0 ELSE k.length END + excluded.length,
        segs = CASE WHEN {_FRESH_TAIL} THEN CASE WHEN k.kind = 'd' THEN 1 ELSE k.segs + 1 END ELSE k.segs END,
        tail = CASE WHEN {_FRESH_TAIL} THEN excluded.tail ELSE k.tail + 1 + excluded.tail END
    WHERE k.kind IN ('l', 'd') AND {_NEW_SIZE} <= %(max_bytes)s
    RETURNING k.version, k.length, k.segs
), s AS (
    INSERT INTO state_segments AS s (ns, key, seg, items, count)
    SELECT %(ns)s, %(key)s, h.segs, %(payload)s, %(count)s FROM h
    ON CONFLICT (ns, key, seg) DO UPDATE
        SET items = s.items || '\\x2c'::bytea || excluded.items, count = s.count + excluded.count
)
SELECT version, length FROM h"""

ENSURE_ROW = """INSERT INTO state_keys (ns, key, version, kind) VALUES (%s, %s, 0, 'd')
    ON CONFLICT (ns, key) DO NOTHING"""
LOCK = "SELECT version, kind, CASE WHEN kind = 'v' THEN data END FROM state_keys WHERE ns = %s AND key = %s FOR UPDATE"
DELETE_SEGMENTS = "DELETE FROM state_segments WHERE ns = %s AND key = %s"
WRITE_VALUE = """UPDATE state_keys SET version = version + 1, kind = 'v', data = %s, size = 0, length = 0, segs = 0,
    tail = 0 WHERE ns = %s AND key = %s RETURNING version"""
TOMBSTONE = f"UPDATE state_keys SET kind = 'd', {_CLEAR} WHERE ns = %s AND key = %s"
TO_LIST = """UPDATE state_keys SET kind = 'l', data = NULL, size = %s, length = %s, segs = %s, tail = %s
    WHERE ns = %s AND key = %s"""
TOUCH_LIST = """UPDATE state_keys SET version = version + 1, kind = 'l',
    size = CASE WHEN kind = 'd' THEN 2 ELSE size END, length = CASE WHEN kind = 'd' THEN 0 ELSE length END,
    segs = CASE WHEN kind = 'd' THEN 0 ELSE segs END, tail = CASE WHEN kind = 'd' THEN 0 ELSE tail END
    WHERE ns = %s AND key = %s RETURNING version, length"""
FIRST_SEGMENT = "INSERT INTO state_segments (ns, key, seg, items, count) VALUES (%s, %s, 1, %s, %s)"

KEYS = """SELECT key, version FROM state_keys
    WHERE ns = %s AND kind <> 'd' AND key > %s AND key >= %s AND key < %s ORDER BY key LIMIT %s"""

DROP_HEADERS = f"UPDATE state_keys SET kind = 'd', {_CLEAR} WHERE ns = %s AND kind <> 'd' RETURNING key"
DROP_SEGMENTS = "DELETE FROM state_segments WHERE ns = %s AND key = ANY(%s)"

EXPORT = f"""SELECT k.ns, k.key, k.version, k.kind, k.data, {_LIST_DATA} FROM state_keys k
    WHERE (k.ns, k.key) > (%s, %s) AND k.version > 0 ORDER BY k.ns, k.key LIMIT %s"""
RESTORE = """INSERT INTO state_keys AS k (ns, key, version, kind, data) VALUES (%s, %s, %s, %s, %s)
    ON CONFLICT (ns, key) DO UPDATE SET version = excluded.version, kind = excluded.kind, data = excluded.data,
        size = 0, length = 0, segs = 0, tail = 0"""


# ---------------------------------------------------------------- pure helpers

def _payload(items: Sequence[bytes]) -> bytes:
    """The comma-joined item JSON a segment holds: the inside of ``[...]``."""
    return b",".join(items)


def _list_bytes(payload: bytes | None) -> bytes:
    return b"[" + (payload or b"") + b"]"


def _current(version: int, kind: str) -> int:
    """The version a caller sees: 0 for an absent or deleted key."""
    return 0 if kind == "d" else version


def _check_if_version(if_version: int | None, current: int) -> None:
    if if_version is not None and if_version != current:
        raise VersionConflict(current_version=current)


def _entry(kind: str, data: bytes | None, list_payload: bytes | None) -> bytes:
    return _list_bytes(list_payload) if kind == "l" else bytes(data or b"")


Conn = psycopg.AsyncConnection[Any]


class PostgresState(StateFacet):
    """The state facet on one PostgreSQL database (the URL's schema, via search_path)."""

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool) -> None:
        self.pool = pool

    async def get(self, ns: str, key: str) -> Entry | None:
        async with aconnection(self.pool) as conn:
            row = await (await conn.execute(GET, (ns, key), binary=True)).fetchone()
        if row is None:
            return None
        version, kind, data, payload = row
        return Entry(_entry(kind, data, payload), version)

    async def get_with(self, scalar: str, params: tuple[object, ...], ns: str, key: str) -> tuple[Any, Entry | None]:
        """One entry and ``scalar`` (a SELECT of one value from another table of this database, with
        ``params``) in one statement: one round trip, one snapshot. The server reads a run token's
        lease with the value its GET asks for."""
        async with aconnection(self.pool) as conn:
            cursor = await conn.execute(GET_WITH.format(scalar=scalar), (*params, ns, key), binary=True)
            row = await cursor.fetchone()
        assert row is not None  # the outer join always yields its one row
        scalar_value, version, kind, data, payload = row
        return scalar_value, None if kind is None else Entry(_entry(kind, data, payload), version)

    async def put(self, ns: str, key: str, data: bytes, if_version: int | None = None) -> int:
        params = {"ns": ns, "key": key, "data": data, "if_version": if_version}
        sql = PUT_ANY if if_version is None else PUT_IF_ABSENT if if_version == 0 else PUT_IF_VERSION
        async with aconnection(self.pool) as conn:
            row = await (await conn.execute(sql, params)).fetchone()
            if row is not None:
                return int(row[0])
            return await self._put_locked(conn, ns, key, data, if_version)

    async def _put_locked(self, conn: Conn, ns: str, key: str, data: bytes, if_version: int | None) -> int:
        """The slow path: a conflict to report, or a list to replace by a value."""
        async with conn.transaction():
            await conn.execute(ENSURE_ROW, (ns, key))
            version, kind, _ = await self._lock(conn, ns, key)
            _check_if_version(if_version, _current(version, kind))
            if kind == "l":
                await conn.execute(DELETE_SEGMENTS, (ns, key))
            row = await (await conn.execute(WRITE_VALUE, (data, ns, key))).fetchone()
        assert row is not None  # the row is locked by this transaction
        return int(row[0])

    async def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        async with aconnection(self.pool) as conn:
            row = await (await conn.execute(DELETE_VALUE, {"ns": ns, "key": key, "if_version": if_version})).fetchone()
            if row is not None:
                return True
            return await self._delete_locked(conn, ns, key, if_version)

    async def _delete_locked(self, conn: Conn, ns: str, key: str, if_version: int | None) -> bool:
        async with conn.transaction():
            locked = await (await conn.execute(LOCK, (ns, key))).fetchone()
            version, kind = (0, "d") if locked is None else (locked[0], locked[1])
            _check_if_version(if_version, _current(version, kind))
            if kind == "d":
                return False
            if kind == "l":
                await conn.execute(DELETE_SEGMENTS, (ns, key))
            await conn.execute(TOMBSTONE, (ns, key))
            return True

    async def append(self, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]:
        payload = _payload(items)
        params: dict[str, Any] = {
            "ns": ns, "key": key, "payload": payload, "payload_bytes": len(payload), "size": len(payload) + 2,
            "count": len(items), "seg_bytes": SEGMENT_BYTES, "max_bytes": MAX_VALUE_BYTES,
        }
        async with aconnection(self.pool) as conn:
            if items and params["size"] <= MAX_VALUE_BYTES:
                row = await (await conn.execute(APPEND, params)).fetchone()
                if row is not None:
                    return int(row[0]), int(row[1])
            return await self._append_locked(conn, params)

    async def _append_locked(self, conn: Conn, params: dict[str, Any]) -> tuple[int, int]:
        """The slow path: a stored value to convert once, no items, NotAList or TooLarge."""
        ns, key = params["ns"], params["key"]
        async with conn.transaction():
            await conn.execute(ENSURE_ROW, (ns, key))
            _, kind, data = await self._lock(conn, ns, key)
            if kind == "v":
                await self._convert(conn, ns, key, bytes(data))
            if params["count"]:
                row = await (await conn.execute(APPEND, params)).fetchone()
            else:  # nothing to add: still a write (version + 1), creating the empty list if needed
                row = await (await conn.execute(TOUCH_LIST, (ns, key))).fetchone()
            if row is None:
                raise TooLarge(f"the list would pass the limit of {MAX_VALUE_BYTES} bytes; nothing was added")
        return int(row[0]), int(row[1])

    async def _convert(self, conn: Conn, ns: str, key: str, data: bytes) -> None:
        """Turn a stored JSON list into one segment (its inside is already the comma-joined items)."""
        if not data.startswith(b"["):
            raise NotAList(f"{key!r} holds a value that is not a list")
        count = len(orjson.loads(data))
        inner = data[1:-1]
        await conn.execute(TO_LIST, (len(data), count, 1 if count else 0, len(inner), ns, key))
        if count:
            await conn.execute(FIRST_SEGMENT, (ns, key, inner, count))

    @staticmethod
    async def _lock(conn: Conn, ns: str, key: str) -> tuple[int, str, Any]:
        row = await (await conn.execute(LOCK, (ns, key))).fetchone()
        assert row is not None  # ENSURE_ROW made it
        return int(row[0]), str(row[1]), row[2]

    async def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        async with aconnection(self.pool) as conn:
            rows = await (await conn.execute(KEYS, (ns, after, prefix, prefix + "\x7f", limit))).fetchall()
        return [(str(key), int(version)) for key, version in rows]

    async def drop(self, ns: str) -> None:
        async with aconnection(self.pool) as conn, conn.transaction():
            await drop(conn, ns)

    async def records(self) -> AsyncIterator[StateRecord]:
        """Every key, tombstones included, in (namespace, key) order, one page per statement."""
        after = ("", "")
        while True:
            async with aconnection(self.pool) as conn:
                cursor = await conn.execute(EXPORT, (*after, EXPORT_PAGE), binary=True)
                rows = await cursor.fetchall()
            for ns, key, version, kind, data, payload in rows:
                yield StateRecord(ns, key, version, None if kind == "d" else _entry(kind, data, payload))
            if len(rows) < EXPORT_PAGE:
                return
            after = (rows[-1][0], rows[-1][1])

    async def restore(self, record: StateRecord) -> None:
        ns, key = record.ns, record.key
        kind = "d" if record.data is None else "v"
        async with aconnection(self.pool) as conn, conn.transaction():
            await conn.execute(ENSURE_ROW, (ns, key))
            await self._lock(conn, ns, key)
            await conn.execute(DELETE_SEGMENTS, (ns, key))
            await conn.execute(RESTORE, (ns, key, record.version, kind, record.data))


async def drop(conn: Conn, ns: str) -> None:
    """Tombstone every live key of ``ns`` inside the caller's transaction; the header locks fence off
    concurrent appends (also a step of ``PostgresDatabase.delete_session``)."""
    dropped = [row[0] for row in await (await conn.execute(DROP_HEADERS, (ns,))).fetchall()]
    if dropped:
        await conn.execute(DROP_SEGMENTS, (ns, dropped))
