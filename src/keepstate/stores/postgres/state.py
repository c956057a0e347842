"""The state facet on PostgreSQL: many server processes on many machines sharing one database.

Layout: a header row per key in ``state_keys`` — version, kind (``v`` value, ``l`` appended list,
``d`` tombstone keeping the last version so versions never repeat), the canonical JSON bytes of a
``v`` value, ``expires_at`` (ms, by the database's clock), and for a list its size in bytes, length,
``base`` (the absolute position of its first item), and the position and weight of its last segment
(``tail_pos``, ``tail``). A list's items live in ``state_segments`` rows of comma-joined item JSON with
each item's byte length (``lens``), keyed by the absolute position of their first item (``pos``: one
index serves every lookup, so no plan depends on statistics). Appends go into the last segment
while it stays under ``SEGMENT_BYTES`` (small enough to stay in the row, not TOAST), else into new
ones; a part of a list (``tail``, ``items``) reads only the segments holding it, found by ``pos``;
``trim`` deletes the segments below its cut and rewrites the one it cuts; ``pop`` rewrites the tail
segment. Values are ``bytea``, never ``jsonb`` (reading 1 MiB of jsonb costs ~5x). Keys use the "C"
collation so SQL order is byte order.

Every common call is ONE statement (``state_sql``; the writes in ``state_ops``, with their locked
path). Expiry is judged by the database's clock in every statement, so an expired key is absent for
every call the moment it expires; ``sweep`` only frees space, through a partial index on
``expires_at``. A batch is one transaction that first locks every header it touches in key order.
Invariant: segment rows exist only while the header says ``l``, and only a holder of the header's
row lock changes them, so no statement ever sees or leaves half a list.

A list written whole by ``put`` stays one value until its first append, trim or pop splits it into
segments; ``tail`` and ``items`` of such a list parse it whole (at most 1 MiB).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..base import StateFacet
from ..batches import Gathered
from ..lists import join_items
from ..records import BatchOp, Entry, ListPage, StateRecord
from . import state_ops
from . import state_sql as sql
from .db import aconnection
from .state_lists import page
from .state_sql import SEGMENT_BYTES, STEPS

try:
    import psycopg
    import psycopg_pool
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

__all__ = ["COMPONENT", "SEGMENT_BYTES", "STEPS", "PostgresState", "copy", "drop", "keep_first"]

COMPONENT = "state"
EXPORT_PAGE = 500


def _entry(kind: str, data: bytes | None, list_payload: bytes | None) -> bytes:
    return b"[" + (list_payload or b"") + b"]" if kind == "l" else bytes(data or b"")


class PostgresState(StateFacet):
    """The state facet on one PostgreSQL database (the URL's schema, via search_path)."""

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool) -> None:
        self.pool = pool

    async def get(self, ns: str, key: str) -> Entry | None:
        async with aconnection(self.pool) as conn:
            row = await (await conn.execute(sql.GET, (ns, key), binary=True)).fetchone()
        if row is None:
            return None
        version, kind, data, payload, expires_at = row
        return Entry(_entry(kind, data, payload), version, expires_at)

    async def get_with(self, scalar: str, params: tuple[object, ...], ns: str, key: str) -> tuple[Any, Entry | None]:
        """One entry and ``scalar`` (a SELECT of one value from another table of this database, with
        ``params``) in one statement: one round trip, one snapshot. The server reads a run token's
        lease with the value its GET asks for."""
        async with aconnection(self.pool) as conn:
            cursor = await conn.execute(sql.GET_WITH.format(scalar=scalar), (*params, ns, key), binary=True)
            row = await cursor.fetchone()
        assert row is not None  # the outer join always yields its one row
        scalar_value, version, kind, data, payload, expires_at = row
        return scalar_value, None if kind is None else Entry(_entry(kind, data, payload), version, expires_at)

    async def write(self, op: BatchOp) -> Any:
        async with aconnection(self.pool) as conn:
            return await state_ops.apply(conn, op)

    async def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        async with aconnection(self.pool) as conn:
            rows = await (await conn.execute(sql.KEYS, (ns, after, prefix, prefix + "\x7f", limit))).fetchall()
        return [(str(key), int(version)) for key, version in rows]

    async def drop(self, ns: str) -> None:
        async with aconnection(self.pool) as conn:
            await drop(conn, ns)

    async def records(self) -> AsyncIterator[StateRecord]:
        """Every key, tombstones included (an expired key as one), in (namespace, key) order, one page per
        statement."""
        after = ("", "")
        while True:
            async with aconnection(self.pool) as conn:
                cursor = await conn.execute(sql.EXPORT, (*after, EXPORT_PAGE), binary=True)
                rows = await cursor.fetchall()
            for ns, key, version, kind, data, payload, expires_at in rows:
                dead = kind == "d"
                yield StateRecord(
                    ns, key, version, None if dead else _entry(kind, data, payload), None if dead else expires_at
                )
            if len(rows) < EXPORT_PAGE:
                return
            after = (rows[-1][0], rows[-1][1])

    async def restore(self, record: StateRecord) -> None:
        live = record.data is not None
        params = {
            "ns": record.ns,
            "key": record.key,
            "version": record.version,
            "kind": "v" if live else "d",
            "data": record.data,
            "expires_at": record.expires_at if live else None,
        }
        async with aconnection(self.pool) as conn, conn.transaction():
            await state_ops.lock(conn, record.ns, record.key, create=True)
            await conn.execute(sql.RESTORE, params)

    async def tail(self, ns: str, key: str, n: int) -> ListPage | None:
        async with aconnection(self.pool) as conn:
            rows = await (await conn.execute(sql.TAIL, {"ns": ns, "key": key, "n": n}, binary=True)).fetchall()
        return page(rows, key, tail=n)

    async def items(self, ns: str, key: str, start: int, limit: int) -> ListPage | None:
        params = {"ns": ns, "key": key, "start": start, "limit": limit}
        async with aconnection(self.pool) as conn:
            rows = await (await conn.execute(sql.ITEMS, params, binary=True)).fetchall()
        return page(rows, key, None, start, limit)

    async def batch(self, ops: Sequence[BatchOp]) -> list[Any]:
        async with aconnection(self.pool) as conn, conn.transaction():
            await state_ops.lock_all(conn, ops)
            return await _run_batch(conn, ops)

    async def sweep(self, limit: int = 1000) -> int:
        async with aconnection(self.pool) as conn:
            row = await (await conn.execute(sql.SWEEP, (limit,))).fetchone()
        return int(row[0]) if row is not None else 0


async def _run_batch(conn: state_ops.Conn, batch: Sequence[BatchOp]) -> list[Any]:
    """Each op in order; version conflicts gathered (that op writes nothing), any other error raised with
    its op's index. Raising rolls the caller's transaction back: all or nothing."""
    gathered = Gathered()
    for index, op in enumerate(batch):
        with gathered.op(index, op):
            gathered.results.append(await state_ops.apply(conn, op))
    return gathered.answers()


async def drop(conn: psycopg.AsyncConnection[Any], ns: str) -> None:
    """Tombstone every live key of ``ns``, locking their headers in key order (as a batch does) so that
    concurrent appends are fenced off; also a step of ``PostgresDatabase.delete_session``."""
    await conn.execute(sql.DROP, {"ns": ns})


async def copy(conn: psycopg.AsyncConnection[Any], source: str, target: str) -> None:
    """Make namespace ``target`` hold ``source``'s live keys — values, lists, versions, expiries — and
    nothing else: a step of ``PostgresDatabase.fork_session``, whose one snapshot (REPEATABLE READ) the
    three statements read."""
    names = {"source": source, "target": target}
    await drop(conn, target)
    await conn.execute(sql.COPY, names)
    await conn.execute(sql.COPY_SEGMENTS, names)


async def keep_first(conn: psycopg.AsyncConnection[Any], ns: str, key: str, n: int) -> None:
    """Cut a list of a fork to its first ``n`` items, stored whole until its next append splits it (a
    write; its expiry kept); an absent key stays absent; NotAList for another value."""
    params = {"ns": ns, "key": key, "start": 0, "limit": n}
    kept = page(await (await conn.execute(sql.ITEMS, params, binary=True)).fetchall(), key, None, 0, n)
    if kept is not None:
        written = {"ns": ns, "key": key, "data": join_items(kept.items), "ttl": None, "keep": True}
        await conn.execute(sql.WRITE_VALUE, written)
