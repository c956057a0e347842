"""The state facet's writes on one connection: one statement, else the same write with the header locked.

Every write first sends its one statement (``state_sql``); a row back means it is done. No row means
a guard did not pass: an ``if_version`` that does not hold, an error to report (not a list, not an
integer, too large), a stored JSON list to split into segments, a segment from before schema v2 to
cut anew (with ``lens``), an expired list whose segments must go, or another writer in between. The write
then locks the key's header row (``SELECT … FOR UPDATE``), decides with a fresh snapshot, prepares
what the statement needs, and sends the same statement again, now sure to pass. That locked step
runs in the caller's transaction (a batch, which locked its headers first) or in a short one of its
own. An expired key met under the lock is turned into a tombstone first, so the locked step only
ever sees live keys and tombstones.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from ...errors import NotAList, VersionConflict
from ...values import MAX_VALUE_BYTES, list_size
from ..lists import appended_size, check_append, split_list
from ..numbers import add_checked, integer_of
from ..records import BatchOp, Patcher, unknown_write
from . import state_sql as sql
from .state_lists import chunk
from .state_once import first, unarmed

try:
    import psycopg
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

Conn = psycopg.AsyncConnection[Any]
Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Header:
    """A key's header row as its lock holder sees it (``kind`` 'v', 'l' or 'd'; ``data`` for a 'v')."""

    version: int
    kind: str
    data: bytes | None = None
    size: int = 0
    length: int = 0
    base: int = 0

    @property
    def current(self) -> int:
        """The version a caller sees: 0 for an absent, deleted or expired key."""
        return 0 if self.kind == "d" else self.version


ABSENT = Header(0, "d")


async def one(conn: Conn, query: str, params: Any) -> Row | None:
    return await (await conn.execute(query, params)).fetchone()


def _step(conn: Conn) -> AbstractAsyncContextManager[Any]:
    """The caller's transaction (a batch's), or a short one of this write's own (never for a write whose
    answer its one statement was to keep: ``state_once.Locked``)."""
    unarmed()
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return conn.transaction()
    return nullcontext()


async def lock(conn: Conn, ns: str, key: str, create: bool) -> Header:
    """Lock the key's header row (made first when ``create``), burying it if it has expired."""
    row = await one(conn, sql.LOCK, (ns, key))
    if row is None and create:
        await conn.execute(sql.ENSURE_ROW, (ns, key))
        row = await one(conn, sql.LOCK, (ns, key))
    if row is None:
        return ABSENT
    version, kind, data, expired, size, length, base = row
    if expired:
        await conn.execute(sql.TOMBSTONE, {"ns": ns, "key": key})
        return Header(int(version), "d")
    return Header(int(version), str(kind), None if data is None else bytes(data), int(size), int(length), int(base))


def _check(if_version: int | None, header: Header) -> None:
    if if_version is not None and if_version != header.current:
        raise VersionConflict(current_version=header.current)


def _not_a_list(key: str) -> NotAList:
    return NotAList(f"{key!r} holds a value that is not a list")


async def _write(conn: Conn, ns: str, key: str, data: bytes, ttl_ms: int | None, keep: bool) -> int:
    """Replace the locked key by a value (its segments deleted); ``keep``: keep its expiry without a ttl."""
    row = await one(conn, sql.WRITE_VALUE, {"ns": ns, "key": key, "data": data, "ttl": ttl_ms, "keep": keep})
    assert row is not None  # the header row exists and is locked by this transaction
    return int(row[0])


async def _as_list(conn: Conn, ns: str, key: str, header: Header) -> Header:
    """The locked key as a list of segments or a tombstone: a stored JSON list is split into segments once."""
    if header.kind != "v":
        return header
    if header.data is None or not header.data.startswith(b"["):
        raise _not_a_list(key)
    items = split_list(header.data)
    size = list_size(map(len, items), len(items))
    params = {"ns": ns, "key": key, "size": size, "at": 0, **chunk(items).params()}
    await conn.execute(sql.TO_LIST, params)
    if items:
        await conn.execute(sql.SEGMENTS, params)
    return Header(header.version, "l", None, size, len(items), 0)


async def _recut(conn: Conn, ns: str, key: str, at: int) -> None:
    """Cut the segment holding item ``at`` (absolute) anew when it was written before schema v2: into
    bounded segments with their ``lens`` at the same positions (the header's tail following it)."""
    row = await one(conn, sql.OLD_SEGMENT_AT, {"ns": ns, "key": key, "at": at})
    if row is None:
        return
    params = {"ns": ns, "key": key, "at": row[0], **chunk(split_list(b"[" + bytes(row[1]) + b"]")).params()}
    await conn.execute(sql.DELETE_SEGMENT, params)
    await conn.execute(sql.SEGMENTS, params)
    await conn.execute(sql.RETAIL, params)


# ---------------------------------------------------------------- the writes


async def put(conn: Conn, ns: str, key: str, data: bytes, if_version: int | None, ttl_ms: int | None) -> int:
    params = {"ns": ns, "key": key, "data": data, "if_version": if_version, "ttl": ttl_ms}
    query = sql.PUT_ANY if if_version is None else sql.PUT_IF_ABSENT if if_version == 0 else sql.PUT_IF_VERSION
    row = await first(conn, query, params)
    if row is not None:
        return int(row[0])
    async with _step(conn):
        _check(if_version, await lock(conn, ns, key, create=True))
        return await _write(conn, ns, key, data, ttl_ms, keep=False)


async def delete(conn: Conn, ns: str, key: str, if_version: int | None) -> bool:
    params = {"ns": ns, "key": key, "if_version": if_version}
    if await first(conn, sql.DELETE_VALUE, params) is not None:
        return True
    async with _step(conn):
        header = await lock(conn, ns, key, create=False)
        _check(if_version, header)
        if header.kind == "d":
            return False
        await conn.execute(sql.TOMBSTONE, params)
        return True


async def append(conn: Conn, ns: str, key: str, items: Sequence[bytes], ttl_ms: int | None) -> tuple[int, int]:
    size = list_size(map(len, items), len(items))
    params = {
        "ns": ns,
        "key": key,
        "size": size,
        "seg_bytes": sql.SEGMENT_BYTES,
        "ttl": ttl_ms,
        **chunk(items).params(),
    }
    if items and size <= MAX_VALUE_BYTES:
        row = await first(conn, sql.APPEND, params)
        if row is not None:
            return int(row[0]), int(row[1])
    async with _step(conn):
        header = await _as_list(conn, ns, key, await lock(conn, ns, key, create=True))
        check_append(appended_size(header.size, header.length, [len(item) for item in items]))
        row = await one(conn, sql.APPEND if items else sql.TOUCH_LIST, params)
    assert row is not None  # locked, a list or a tombstone, and room enough: the statement passes
    return int(row[0]), int(row[1])


async def trim(
    conn: Conn, ns: str, key: str, keep_last: int, if_version: int | None, ttl_ms: int | None
) -> tuple[int, int]:
    params = {"ns": ns, "key": key, "keep": keep_last, "if_version": if_version, "ttl": ttl_ms}
    row = await first(conn, sql.TRIM, params)
    if row is not None:
        return int(row[0]), int(row[1])
    async with _step(conn):
        header = await lock(conn, ns, key, create=False)
        _check(if_version, header)
        if header.kind == "d":
            return 0, 0
        header = await _as_list(conn, ns, key, header)
        if 0 < header.length - keep_last < header.length:
            await _recut(conn, ns, key, header.base + header.length - keep_last)
        row = await one(conn, sql.TRIM, params)
    assert row is not None  # locked, a list, every segment it cuts with its lens: the statement passes
    return int(row[0]), int(row[1])


async def pop(conn: Conn, ns: str, key: str, if_version: int | None) -> tuple[bytes, int, int] | None:
    params = {"ns": ns, "key": key, "if_version": if_version}
    row = await first(conn, sql.POP, params)
    if row is None:
        async with _step(conn):
            header = await lock(conn, ns, key, create=False)
            _check(if_version, header)
            if header.kind == "d":
                return None
            header = await _as_list(conn, ns, key, header)
            if header.length == 0:
                return None
            await _recut(conn, ns, key, header.base + header.length - 1)
            row = await one(conn, sql.POP, params)
        assert row is not None  # locked, a list with an item, its tail segment with its lens
    return bytes(row[0]), int(row[1]), int(row[2])


def _integer(header: Header) -> int:
    """What ``incr`` adds to: 0 for an absent key, else the stored integer (NotAnInteger otherwise)."""
    if header.kind == "d":
        return 0
    return integer_of(header.data if header.data is not None else b"")  # a list: no integer either


async def incr(conn: Conn, ns: str, key: str, by: int, if_version: int | None, ttl_ms: int | None) -> tuple[int, int]:
    params = {"ns": ns, "key": key, "by": by, "first": str(by).encode(), "if_version": if_version, "ttl": ttl_ms}
    query = sql.INCR_ANY if if_version is None else sql.INCR_IF_ABSENT if if_version == 0 else sql.INCR_IF_VERSION
    row = await first(conn, query, params)
    if row is not None:
        return int(row[0]), int(row[1])
    async with _step(conn):
        header = await lock(conn, ns, key, create=True)
        _check(if_version, header)
        value = add_checked(_integer(header), by)
        return value, await _write(conn, ns, key, str(value).encode(), ttl_ms, keep=True)


async def update(
    conn: Conn, ns: str, key: str, patcher: Patcher, if_version: int | None, ttl_ms: int | None
) -> tuple[bytes, int]:
    async with _step(conn):
        header = await lock(conn, ns, key, create=True)
        _check(if_version, header)
        data = patcher(await _value(conn, ns, key, header))
        return data, await _write(conn, ns, key, data, ttl_ms, keep=True)


async def _value(conn: Conn, ns: str, key: str, header: Header) -> bytes | None:
    """The locked key's canonical JSON (None when absent)."""
    if header.kind != "l":
        return header.data
    row = await one(conn, sql.LIST_DATA, (ns, key))
    return b"[" + (bytes(row[0]) if row is not None and row[0] is not None else b"") + b"]"


# ---------------------------------------------------------------- batches


async def lock_all(conn: Conn, ops: Sequence[BatchOp]) -> None:
    """Make and lock every header a batch touches, in (namespace, key) order: two batches never deadlock."""
    where = sorted({(op.ns, op.key) for op in ops})
    params = {"nss": [ns for ns, _ in where], "keys": [key for _, key in where]}
    await conn.execute(sql.LOCK_MANY, params)
    await conn.execute(sql.LOCK_ORDERED, params)


async def apply(conn: Conn, op: BatchOp) -> Any:
    """One write, alone (the facet's ``write``) or as an op of a batch (on its connection and transaction)."""
    if op.op == "put":
        return await put(conn, op.ns, op.key, op.data, op.if_version, op.ttl_ms)
    if op.op == "append":
        return await append(conn, op.ns, op.key, op.items, op.ttl_ms)
    if op.op == "incr":
        return await incr(conn, op.ns, op.key, op.by, op.if_version, op.ttl_ms)
    if op.op == "delete":
        return await delete(conn, op.ns, op.key, op.if_version)
    if op.op == "pop":
        return await pop(conn, op.ns, op.key, op.if_version)
    if op.op == "patch":
        assert op.patcher is not None
        return await update(conn, op.ns, op.key, op.patcher, op.if_version, op.ttl_ms)
    if op.op == "trim":
        return await trim(conn, op.ns, op.key, op.keep_last, op.if_version, op.ttl_ms)
    raise unknown_write(op)
