"""The state facet on SQLite: the embedded store, shared safely by several processes on one machine.

Layout. A small header row per key holds its version, its kind (``v`` a value, ``l`` a list
built by append, ``d`` a tombstone that keeps the last version so versions never repeat) and,
for a list, its JSON size and length. A list's items live in bounded segment rows: an append
adds to the last segment while it is under ``SEGMENT_BYTES`` and starts a new one after, so its
cost does not grow with the list, and reading a 1 MiB list reads ~100 rows, not 10,000.
A trigger drops a list's segments when its key stops being a list (put or delete).

Every operation is one function of a connection (the ``_op`` functions below), run in one
``BEGIN IMMEDIATE`` transaction by the sync face, or group-committed by the writer thread of
``SqliteFile`` for the async face. Reads run in a read transaction: one snapshot.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from functools import lru_cache, partial
from typing import Any

from ...errors import NotAList, VersionConflict
from ..base import StateFacet
from ..lists import appended_size, check_append, join_items, split_list
from ..records import Entry, StateRecord, prefix_end
from .db import SqliteFile

SEGMENT_BYTES = 8 * 1024
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
]

_HEADER = "SELECT version, kind, value, size, length FROM keepstate_kv WHERE ns = ? AND key = ?"
_PUT = (
    "INSERT INTO keepstate_kv (ns, key, version, kind, value, size, length) VALUES (?, ?, 1, 'v', ?, ?, 0) "
    "ON CONFLICT (ns, key) DO UPDATE SET version = version + 1, kind = 'v', value = excluded.value, "
    "size = excluded.size, length = 0 {guard} RETURNING version"
)
_PUT_ANY = _PUT.format(guard="")
_PUT_ABSENT = _PUT.format(guard="WHERE kind = 'd'")
_PUT_IF = (
    "UPDATE keepstate_kv SET version = version + 1, kind = 'v', value = ?, size = ?, length = 0 "
    "WHERE ns = ? AND key = ? AND kind != 'd' AND version = ? RETURNING version"
)
_TOMBSTONE = "UPDATE keepstate_kv SET kind = 'd', value = NULL, size = 0, length = 0"
_DELETE = _TOMBSTONE + " WHERE ns = ? AND key = ? AND kind != 'd' RETURNING version"
_DROP = _TOMBSTONE + " WHERE ns = ? AND kind != 'd'"
_LAST_SEGMENT = "SELECT seg, bytes FROM keepstate_kv_segments WHERE ns = ? AND key = ? ORDER BY seg DESC LIMIT 1"
_GROW_SEGMENT = (
    "UPDATE keepstate_kv_segments SET items = items || ',' || ?, bytes = bytes + 1 + ? "
    "WHERE ns = ? AND key = ? AND seg = ?"
)
_NEW_SEGMENT = "INSERT INTO keepstate_kv_segments (ns, key, seg, items, bytes) VALUES (?, ?, ?, ?, ?)"
_SET_LIST = (
    "INSERT INTO keepstate_kv (ns, key, version, kind, value, size, length) VALUES (?, ?, ?, 'l', NULL, ?, ?) "
    "ON CONFLICT (ns, key) DO UPDATE SET version = excluded.version, kind = 'l', value = NULL, "
    "size = excluded.size, length = excluded.length"
)
_SEGMENTS = "SELECT items FROM keepstate_kv_segments WHERE ns = ? AND key = ? ORDER BY seg"
_KEYS = (
    "SELECT key, version FROM keepstate_kv WHERE ns = ? AND kind != 'd' AND key > ? AND key >= ? AND key < ? "
    "ORDER BY key LIMIT ?"
)
_RESTORE = (
    "INSERT INTO keepstate_kv (ns, key, version, kind, value, size, length) VALUES (?, ?, ?, ?, ?, ?, 0) "
    "ON CONFLICT (ns, key) DO UPDATE SET version = excluded.version, kind = excluded.kind, "
    "value = excluded.value, size = excluded.size, length = 0"
)


def _current_version(conn: sqlite3.Connection, ns: str, key: str) -> int:
    row = conn.execute(_HEADER, (ns, key)).fetchone()
    return 0 if row is None or row[1] == "d" else int(row[0])


def _put(conn: sqlite3.Connection, ns: str, key: str, data: bytes, if_version: int | None) -> int:
    if if_version is None:
        row = conn.execute(_PUT_ANY, (ns, key, data, len(data))).fetchone()
    elif if_version == 0:
        row = conn.execute(_PUT_ABSENT, (ns, key, data, len(data))).fetchone()
    else:
        row = conn.execute(_PUT_IF, (data, len(data), ns, key, if_version)).fetchone()
    if row is None:
        raise VersionConflict(current_version=_current_version(conn, ns, key))
    return int(row[0])


def _delete(conn: sqlite3.Connection, ns: str, key: str, if_version: int | None) -> bool:
    if if_version is not None:
        current = _current_version(conn, ns, key)
        if current != if_version:
            raise VersionConflict(current_version=current)
    return conn.execute(_DELETE, (ns, key)).fetchone() is not None


def _append(conn: sqlite3.Connection, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]:
    row = conn.execute(_HEADER, (ns, key)).fetchone()
    version, kind, value, size, length = row if row is not None else (0, "d", None, 0, 0)
    if kind == "v":
        stored = bytes(value or b"")
        if not stored.startswith(b"["):
            raise NotAList(f"{key!r} holds a value that is not a list")
        existing = split_list(stored)
        length = len(existing)
        _add_to_segments(conn, ns, key, existing)
    elif kind == "d":
        size, length = 0, 0
    new_size = appended_size(size, length, [len(item) for item in items])
    check_append(new_size)
    _add_to_segments(conn, ns, key, items)
    conn.execute(_SET_LIST, (ns, key, version + 1, new_size, length + len(items)))
    return version + 1, length + len(items)


def _add_to_segments(conn: sqlite3.Connection, ns: str, key: str, items: Sequence[bytes]) -> None:
    """Pack items into the last segment while it has room, then into new segments."""
    if not items:
        return
    last = conn.execute(_LAST_SEGMENT, (ns, key)).fetchone()
    seg, room = (int(last[0]), SEGMENT_BYTES - int(last[1]) - 1) if last else (0, 0)
    chunks = _chunks(items, room)
    first = next(chunks)
    if first:
        joined = b",".join(first)
        conn.execute(_GROW_SEGMENT, (joined.decode(), len(joined), ns, key, seg))
    for chunk in chunks:
        seg += 1
        joined = b",".join(chunk)
        conn.execute(_NEW_SEGMENT, (ns, key, seg, joined.decode(), len(joined)))


def _chunks(items: Sequence[bytes], room: int) -> Iterator[list[bytes]]:
    """Runs of items: the first fits ``room`` (it may be empty), each later one a fresh segment."""
    chunk: list[bytes] = []
    filled = 0
    for item in items:
        cost = len(item) + (1 if chunk else 0)
        if filled + cost > room and (chunk or room < SEGMENT_BYTES):
            yield chunk
            chunk, filled, room, cost = [], 0, SEGMENT_BYTES, len(item)
        chunk.append(item)
        filled += cost
    yield chunk


def _plain(row: Any) -> Entry | None:
    """The entry of a header row that is not a list: None when absent or deleted."""
    return None if row is None or row[1] == "d" else Entry(bytes(row[2]), int(row[0]))


def _get(conn: sqlite3.Connection, ns: str, key: str) -> Entry | None:
    row = conn.execute(_HEADER, (ns, key)).fetchone()
    if row is None or row[1] != "l":
        return _plain(row)
    segments = [text.encode() for (text,) in conn.execute(_SEGMENTS, (ns, key))]
    return Entry(join_items(segments), int(row[0]))


@lru_cache(maxsize=16)
def _header_with(scalar: str) -> str:
    """The header read joined to one scalar subquery: a row even when the key is absent."""
    return (f"SELECT ({scalar}), kv.version, kv.kind, kv.value FROM (SELECT 1) "
            "LEFT JOIN keepstate_kv AS kv ON kv.ns = ? AND kv.key = ?")


def read_with(
    db: SqliteFile, scalar: str, params: tuple[object, ...], ns: str, key: str
) -> tuple[Any, Entry | None]:
    """One entry and ``scalar`` (a SELECT of one value from another table of the file, with
    ``params``) in one statement, so one snapshot: the server reads a run token's lease with the
    value its GET asks for. A list's segments take a second read. Plain, not async: the caller
    is already on the event loop's thread, where reads run, and a coroutine per call costs."""
    row = db.fetchone(_header_with(scalar), (*params, ns, key))
    if row[2] == "l":
        return row[0], db.read(partial(_get, ns=ns, key=key))
    return row[0], None if row[2] is None else _plain(row[1:])


def _read_entry(db: SqliteFile, ns: str, key: str) -> Entry | None:
    """A plain value in one autocommit statement; a list's header and segments in one snapshot.

    The plain value is the common case and the server's hot read, hence no read transaction for it."""
    row = db.fetchone(_HEADER, (ns, key))
    if row is not None and row[1] == "l":
        return db.read(partial(_get, ns=ns, key=key))
    return _plain(row)


def _keys(conn: sqlite3.Connection, ns: str, prefix: str, after: str, limit: int) -> list[tuple[str, int]]:
    rows = conn.execute(_KEYS, (ns, after, prefix, prefix_end(prefix), limit)).fetchall()
    return [(str(key), int(version)) for key, version in rows]


def drop(conn: sqlite3.Connection, ns: str) -> None:
    """Tombstone every live key of ``ns`` (also a step of ``SqliteDatabase.delete_session``)."""
    conn.execute(_DROP, (ns,))


def _restore(conn: sqlite3.Connection, record: StateRecord) -> None:
    kind, size = ("d", 0) if record.data is None else ("v", len(record.data))
    conn.execute(_RESTORE, (record.ns, record.key, record.version, kind, record.data, size))


def _records(conn: sqlite3.Connection) -> list[StateRecord]:
    heads = conn.execute("SELECT ns, key, version, kind FROM keepstate_kv ORDER BY ns, key").fetchall()
    records = []
    for ns, key, version, kind in heads:
        entry = None if kind == "d" else _get(conn, ns, key)
        records.append(StateRecord(ns, key, int(version), entry.data if entry else None))
    return records


class SqliteState:
    """The sync face: each write one ``BEGIN IMMEDIATE`` transaction on the caller's thread."""

    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        db.migrate(COMPONENT, STEPS)

    def get(self, ns: str, key: str) -> Entry | None:
        return _read_entry(self.db, ns, key)

    def put(self, ns: str, key: str, data: bytes, if_version: int | None = None) -> int:
        """One upsert statement, atomic on its own: no explicit transaction needed."""
        return self.db.autocommit(partial(_put, ns=ns, key=key, data=data, if_version=if_version))

    def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        return self.db.write(partial(_delete, ns=ns, key=key, if_version=if_version))

    def append(self, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]:
        return self.db.write(partial(_append, ns=ns, key=key, items=items))

    def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        return self.db.read(partial(_keys, ns=ns, prefix=prefix, after=after, limit=limit))

    def drop(self, ns: str) -> None:
        self.db.write(partial(drop, ns=ns))

    def records(self) -> Iterator[StateRecord]:
        yield from self.db.read(_records)

    def restore(self, record: StateRecord) -> None:
        self.db.write(partial(_restore, record=record))


class AsyncSqliteState(StateFacet):
    """The async face: writes group-committed by the file's writer thread, reads on the caller's."""

    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        db.migrate(COMPONENT, STEPS)

    async def get(self, ns: str, key: str) -> Entry | None:
        """Reads take microseconds on a WAL snapshot: done on the event loop's thread."""
        return _read_entry(self.db, ns, key)

    async def put(self, ns: str, key: str, data: bytes, if_version: int | None = None) -> int:
        return await self.db.awrite(partial(_put, ns=ns, key=key, data=data, if_version=if_version))

    async def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        return await self.db.awrite(partial(_delete, ns=ns, key=key, if_version=if_version))

    async def append(self, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]:
        return await self.db.awrite(partial(_append, ns=ns, key=key, items=items))

    async def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        return await self.db.aread(partial(_keys, ns=ns, prefix=prefix, after=after, limit=limit))

    async def drop(self, ns: str) -> None:
        await self.db.awrite(partial(drop, ns=ns))

    async def records(self) -> AsyncIterator[StateRecord]:
        for record in await self.db.aread(_records):
            yield record

    async def restore(self, record: StateRecord) -> None:
        await self.db.awrite(partial(_restore, record=record))
