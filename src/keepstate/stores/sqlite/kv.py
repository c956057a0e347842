"""The state operations on SQLite other than a list's own, each a function of one connection.

Each runs inside its caller's transaction (``state.py`` chooses: the sync face's own
``BEGIN IMMEDIATE``, the writer thread's group commit, a read snapshot), except ``put``: one
guarded upsert statement, atomic on its own, which the sync face runs in autocommit. Every call
reads the clock once (``now``) and judges expiry by it. ``batch`` runs the others in order in
its caller's one transaction: SQLite's single write lock already orders whole batches, so two
batches can never deadlock, and raising undoes every op of it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from ...clock import now_ms
from ...errors import VersionConflict
from ..batches import Gathered
from ..numbers import add_checked, integer_of
from ..records import BatchOp, Entry, Patcher, StateRecord, prefix_end, unknown_write
from . import segments
from .heads import COLUMNS, LIVE, TOMBSTONE, Head, checked, expiry, head_of, read_head, set_value

_PUT = (
    f"INSERT INTO keepstate_kv (ns, key, {COLUMNS}) VALUES (?, ?, 1, 'v', ?, ?, 0, 0, ?) "
    "ON CONFLICT (ns, key) DO UPDATE SET version = version + 1, kind = 'v', value = excluded.value, "
    "size = excluded.size, length = 0, base = 0, expires_at = excluded.expires_at {guard} RETURNING version"
)
_PUT_ANY = _PUT.format(guard="")
_PUT_ABSENT = _PUT.format(guard="WHERE kind = 'd' OR expires_at <= ?")
_PUT_IF = (
    "UPDATE keepstate_kv SET version = version + 1, kind = 'v', value = ?, size = ?, length = 0, base = 0, "
    f"expires_at = ? WHERE ns = ? AND key = ? AND version = ? AND {LIVE} RETURNING version"
)
_DELETE = TOMBSTONE + " WHERE ns = ? AND key = ?"
_DROP = TOMBSTONE + " WHERE ns = ? AND kind != 'd'"
SWEEP = TOMBSTONE + (
    " WHERE rowid IN (SELECT rowid FROM keepstate_kv WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)"
)
_KEYS = (
    f"SELECT key, version FROM keepstate_kv WHERE ns = ? AND {LIVE} AND key > ? AND key >= ? AND key < ? "
    "ORDER BY key LIMIT ?"
)
_RECORDS = f"SELECT ns, key, {COLUMNS} FROM keepstate_kv ORDER BY ns, key"
_RESTORE = (
    f"INSERT INTO keepstate_kv (ns, key, {COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?) "
    "ON CONFLICT (ns, key) DO UPDATE SET version = excluded.version, kind = excluded.kind, "
    "value = excluded.value, size = excluded.size, length = 0, base = 0, expires_at = excluded.expires_at"
)

_COPY = (
    f"INSERT INTO keepstate_kv (ns, key, {COLUMNS}) SELECT ?, key, {COLUMNS} FROM keepstate_kv WHERE ns = ? AND {LIVE} "
    "ON CONFLICT (ns, key) DO UPDATE SET version = max(excluded.version, version + 1), kind = excluded.kind, "
    "value = excluded.value, size = excluded.size, length = excluded.length, base = excluded.base, "
    "expires_at = excluded.expires_at"
)
"""A namespace's live headers into another (emptied first), each version kept above the target row's own."""

# ---------------------------------------------------------------- reads


def get(conn: sqlite3.Connection, ns: str, key: str) -> Entry | None:
    return entry(conn, ns, key, read_head(conn, ns, key, now_ms()))


def entry(conn: sqlite3.Connection, ns: str, key: str, head: Head) -> Entry | None:
    """The live entry ``head`` describes (a list's segments read), or None."""
    if not head.live:
        return None
    data = head.value if head.value is not None else segments.joined(conn, ns, key)
    return Entry(data, head.version, head.expires_at)


def keys(conn: sqlite3.Connection, ns: str, prefix: str, after: str, limit: int) -> list[tuple[str, int]]:
    rows = conn.execute(_KEYS, (ns, now_ms(), after, prefix, prefix_end(prefix), limit)).fetchall()
    return [(str(key), int(version)) for key, version in rows]


def records(conn: sqlite3.Connection) -> list[StateRecord]:
    """Every key, an expired one as the tombstone it will become."""
    now = now_ms()
    found = []
    for row in conn.execute(_RECORDS).fetchall():
        ns, key, head = row[0], row[1], head_of(row[2:], now)
        live = entry(conn, ns, key, head)
        found.append(
            StateRecord(ns, key, head.version, None, None)
            if live is None
            else StateRecord(ns, key, head.version, live.data, live.expires_at)
        )
    return found


# ---------------------------------------------------------------- writes


def put(conn: sqlite3.Connection, ns: str, key: str, data: bytes, if_version: int | None, ttl_ms: int | None) -> int:
    now = now_ms()
    expires_at = None if ttl_ms is None else now + ttl_ms
    if if_version is None:
        row = conn.execute(_PUT_ANY, (ns, key, data, len(data), expires_at)).fetchone()
    elif if_version == 0:
        row = conn.execute(_PUT_ABSENT, (ns, key, data, len(data), expires_at, now)).fetchone()
    else:
        row = conn.execute(_PUT_IF, (data, len(data), expires_at, ns, key, if_version, now)).fetchone()
    if row is None:
        raise VersionConflict(current_version=read_head(conn, ns, key, now).current)
    return int(row[0])


def delete(conn: sqlite3.Connection, ns: str, key: str, if_version: int | None) -> bool:
    """Tombstone the key (an expired one too, freeing it); True when it was live."""
    head = checked(conn, ns, key, if_version, now_ms())
    if head.kind != "d":
        conn.execute(_DELETE, (ns, key))
    return head.live


def incr(
    conn: sqlite3.Connection, ns: str, key: str, by: int, if_version: int | None, ttl_ms: int | None
) -> tuple[int, int]:
    now = now_ms()
    head = checked(conn, ns, key, if_version, now)
    # a list built by append has no stored value: it is no integer either
    value = add_checked(integer_of(head.value or b"[]") if head.live else 0, by)
    return value, set_value(conn, ns, key, head.kind, head.version + 1, str(value).encode(), expiry(ttl_ms, head, now))


def update(
    conn: sqlite3.Connection, ns: str, key: str, patcher: Patcher, if_version: int | None, ttl_ms: int | None
) -> tuple[bytes, int]:
    """``patcher`` called on the current value inside the caller's write transaction, then stored."""
    now = now_ms()
    head = checked(conn, ns, key, if_version, now)
    current = entry(conn, ns, key, head)
    data = patcher(None if current is None else current.data)
    return data, set_value(conn, ns, key, head.kind, head.version + 1, data, expiry(ttl_ms, head, now))


def drop(conn: sqlite3.Connection, ns: str) -> None:
    """Tombstone every key of ``ns`` (also a step of ``SqliteDatabase.delete_session``)."""
    conn.execute(_DROP, (ns,))


def copy(conn: sqlite3.Connection, source: str, target: str) -> None:
    """Make namespace ``target`` hold ``source``'s live keys — values, lists, versions, expiries — and
    nothing else (a step of ``SqliteDatabase.fork_session``, inside its transaction)."""
    drop(conn, target)
    conn.execute(_COPY, (target, source, now_ms()))
    segments.copy(conn, source, target)


def restore(conn: sqlite3.Connection, record: StateRecord) -> None:
    if record.data is None:
        conn.execute(_RESTORE, (record.ns, record.key, record.version, "d", None, 0, None))
    else:
        conn.execute(
            _RESTORE, (record.ns, record.key, record.version, "v", record.data, len(record.data), record.expires_at)
        )


def sweep(conn: sqlite3.Connection, limit: int) -> int:
    """Tombstone up to ``limit`` expired keys, found by the partial index on ``expires_at``."""
    return int(conn.execute(SWEEP, (now_ms(), limit)).rowcount)


# ---------------------------------------------------------------- batches


def _patch(conn: sqlite3.Connection, op: BatchOp) -> tuple[bytes, int]:
    assert op.patcher is not None, "a patch op carries its patcher"
    return update(conn, op.ns, op.key, op.patcher, op.if_version, op.ttl_ms)


_APPLY: dict[str, Callable[[sqlite3.Connection, BatchOp], Any]] = {
    "put": lambda conn, op: put(conn, op.ns, op.key, op.data, op.if_version, op.ttl_ms),
    "delete": lambda conn, op: delete(conn, op.ns, op.key, op.if_version),
    "append": lambda conn, op: segments.append(conn, op.ns, op.key, op.items, op.ttl_ms),
    "trim": lambda conn, op: segments.trim(conn, op.ns, op.key, op.keep_last, op.if_version, op.ttl_ms),
    "pop": lambda conn, op: segments.pop(conn, op.ns, op.key, op.if_version),
    "incr": lambda conn, op: incr(conn, op.ns, op.key, op.by, op.if_version, op.ttl_ms),
    "patch": _patch,
}
"""Each write kind's function of a connection, for one write alone (``apply``) and for a batch's ops."""


def apply(conn: sqlite3.Connection, op: BatchOp) -> Any:
    """One write alone, in the caller's transaction (the state facets' ``write``)."""
    run = _APPLY.get(op.op)
    if run is None:
        raise unknown_write(op)
    return run(conn, op)


def batch(conn: sqlite3.Connection, ops: Sequence[BatchOp]) -> list[Any]:
    """Every op in order; raising (a conflict listing every failed check, or the first other error
    with its ``index``) makes the caller's transaction undo them all. A failed check writes nothing."""
    gathered = Gathered()
    for index, op in enumerate(ops):
        with gathered.op(index, op):
            gathered.results.append(_APPLY[op.op](conn, op))
    return gathered.answers()
