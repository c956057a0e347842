"""A state key's header row on SQLite: one small read says what the key is, and whether it lives.

Every key has one row in ``keepstate_kv``: its version, its kind (``v`` a value, ``l`` a list
built by append, ``d`` a tombstone that keeps the last version), a value's bytes, a list's JSON
size, length and ``base`` (the absolute index of its oldest item, which grows as ``trim`` drops
items), and ``expires_at`` (ms; NULL: never). Updating any column rewrites the whole row, so a
list's items live elsewhere (``segments.py``) and this row stays small.

Whether a key lives is judged here, against the clock reading of the call (``now``): an expired
row reads as absent the moment it expires, whatever ``sweep`` has done, and keeps its version
so that the next write goes on from it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from ...errors import VersionConflict

COLUMNS = "version, kind, value, size, length, base, expires_at"
HEAD = f"SELECT {COLUMNS} FROM keepstate_kv WHERE ns = ? AND key = ?"
LIVE = "kind != 'd' AND (expires_at IS NULL OR expires_at > ?)"
"""A WHERE term: the row is a live key at the time given as its parameter."""
TOMBSTONE = "UPDATE keepstate_kv SET kind = 'd', value = NULL, size = 0, length = 0, base = 0, expires_at = NULL"
_UPDATE = (
    "UPDATE keepstate_kv SET version = ?, kind = ?, value = ?, size = ?, length = ?, base = ?, expires_at = ? "
    "WHERE ns = ? AND key = ?"
)
_INSERT = f"INSERT INTO keepstate_kv ({COLUMNS}, ns, key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
# The same kind again: ``kind`` left out of the SET, so SQLite has no trigger to consider (2-3 µs of ~6).
_SAME_VALUE = "UPDATE keepstate_kv SET version = ?, value = ?, size = ?, expires_at = ? WHERE ns = ? AND key = ?"
_SAME_LIST = (
    "UPDATE keepstate_kv SET version = ?, size = ?, length = ?, base = ?, expires_at = ? WHERE ns = ? AND key = ?"
)


@dataclass(slots=True)
class Head:
    """A header row as read at one moment; an absent key is a version-0 tombstone. Never changed once
    made (``dataclasses.replace`` makes another); not frozen, which would slow the hot read's one."""

    version: int = 0
    kind: str = "d"
    value: bytes | None = None
    size: int = 0
    length: int = 0
    base: int = 0
    expires_at: int | None = None
    live: bool = False

    @property
    def current(self) -> int:
        """The version ``if_version`` is checked against: 0 when absent, deleted or expired."""
        return self.version if self.live else 0


ABSENT = Head()


def head_of(row: Any, now: int) -> Head:
    """The ``Head`` of a row of ``COLUMNS``, judged at ``now``."""
    version, kind, value, size, length, base, expires_at = row
    live = kind != "d" and (expires_at is None or expires_at > now)
    return Head(
        int(version), kind, None if value is None else bytes(value), int(size), int(length), int(base), expires_at, live
    )


def read_head(conn: sqlite3.Connection, ns: str, key: str, now: int) -> Head:
    row = conn.execute(HEAD, (ns, key)).fetchone()
    return ABSENT if row is None else head_of(row, now)


def checked(conn: sqlite3.Connection, ns: str, key: str, if_version: int | None, now: int) -> Head:
    """The key's header, once ``if_version`` (when given) holds; VersionConflict, writing nothing, else."""
    head = read_head(conn, ns, key, now)
    if if_version is not None and if_version != head.current:
        raise VersionConflict(current_version=head.current)
    return head


def expiry(ttl_ms: int | None, head: Head, now: int) -> int | None:
    """A write's expiry: ``ttl_ms`` from now, else the key's own while it lives (an expired one's is over)."""
    if ttl_ms is not None:
        return now + ttl_ms
    return head.expires_at if head.live else None


def set_value(
    conn: sqlite3.Connection, ns: str, key: str, stored: str, version: int, data: bytes, expires_at: int | None
) -> int:
    """Store a plain value over a row of kind ``stored`` (a list's segments go with the kind, by
    trigger); its version."""
    if stored == "v":
        conn.execute(_SAME_VALUE, (version, data, len(data), expires_at, ns, key))
    else:
        _write(conn, (version, "v", data, len(data), 0, 0, expires_at, ns, key))
    return version


def set_list(
    conn: sqlite3.Connection,
    ns: str,
    key: str,
    stored: str,
    version: int,
    size: int,
    length: int,
    base: int,
    expires_at: int | None,
) -> tuple[int, int]:
    """Store a list's header over a row of kind ``stored`` (its segments already written) at ``version``
    with its JSON size, length and base; ``(version, length)``."""
    if stored == "l":
        conn.execute(_SAME_LIST, (version, size, length, base, expires_at, ns, key))
    else:
        _write(conn, (version, "l", None, size, length, base, expires_at, ns, key))
    return version, length


def _write(conn: sqlite3.Connection, row: tuple[object, ...]) -> None:
    """Rewrite the header row, or insert it: a plain UPDATE costs half an upsert, and a key is new once."""
    if conn.execute(_UPDATE, row).rowcount == 0:
        conn.execute(_INSERT, row)
