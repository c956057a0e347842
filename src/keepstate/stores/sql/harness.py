"""Every SQL text of the harness store, for SQLite and PostgreSQL, built once per table prefix.

One set of statements serves both dialects: they differ only in the placeholder (``?`` / ``%s``)
and a few column types in the schema, so the store's logic is written once.

Tables (``p`` is the prefix):

- ``p_sessions``: one row per session.
- ``p_operations``: one row per operation. ``seq`` is the database's own never-reused counter
  (SQLite ``AUTOINCREMENT``, PostgreSQL identity), not ``MAX(seq) + 1``, so deleting the newest
  operation never hands its number out again.
- ``p_logs``: one small head row per ``(session, log)`` holding the log's end. Every write to a log
  goes through it first, which serialises writers of one log (a row lock on PostgreSQL) and keeps
  ``end`` a point read.
- ``p_entries``: log entries, one row per chunk of at most ``chunk_size`` bytes of the entry's
  JSON; part 0 carries the entry's id and creation time, and a unique index keeps ids unique
  within a log.
"""

from __future__ import annotations

from dataclasses import dataclass

from .engine import Dialect

_TYPES: dict[Dialect, dict[str, str]] = {
    "sqlite": {"serial": "INTEGER PRIMARY KEY AUTOINCREMENT", "blob": "BLOB"},
    "postgres": {"serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "blob": "BYTEA"},
}

_STEP_1 = """
CREATE TABLE {p}sessions (
  id TEXT PRIMARY KEY,
  parent TEXT,
  state TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX {p}sessions_created ON {p}sessions (created_at, id);
CREATE TABLE {p}operations (
  seq {serial},
  session TEXT NOT NULL,
  id TEXT NOT NULL,
  status TEXT NOT NULL,
  input TEXT NOT NULL,
  meta TEXT NOT NULL,
  result TEXT NOT NULL,
  reason TEXT,
  created_at BIGINT NOT NULL,
  settled_at BIGINT,
  UNIQUE (session, id)
);
CREATE INDEX {p}operations_status ON {p}operations (status, seq);
CREATE TABLE {p}logs (
  session TEXT NOT NULL,
  log TEXT NOT NULL,
  last BIGINT NOT NULL,
  PRIMARY KEY (session, log)
);
CREATE TABLE {p}entries (
  session TEXT NOT NULL,
  log TEXT NOT NULL,
  seq BIGINT NOT NULL,
  part INTEGER NOT NULL,
  id TEXT,
  data {blob} NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (session, log, seq, part)
);
CREATE UNIQUE INDEX {p}entries_id ON {p}entries (session, log, id) WHERE id IS NOT NULL;
"""

STEPS = (_STEP_1,)
"""Append-only: never edit a released step, add one."""

NO_LIMIT = 2**62

_SESSION = "id, parent, state, created_at, updated_at"
_OPERATION = "session, id, seq, status, input, meta, result, reason, created_at, settled_at"
_ENTRY = "seq, part, id, data, created_at"


_WRITE_BATCH = """
WITH batch (k, part, parts, id, data, created_at) AS (
  SELECT * FROM unnest(?::int[], ?::int[], ?::int[], ?::text[], ?::bytea[], ?::bigint[])
), head AS (
  SELECT last FROM {p}logs WHERE session = ? AND log = ?
), found AS (  -- one index probe per id given (OFFSET 0 keeps it a probe, whatever the statistics)
  SELECT e.id, e.seq, e.created_at FROM unnest(?::text[]) AS given (id) CROSS JOIN LATERAL (
    SELECT id, seq, created_at FROM {p}entries WHERE session = ? AND log = ? AND id = given.id OFFSET 0) e
), placed AS (
  SELECT b.k, b.parts, f.seq IS NULL AS new, COALESCE(f.created_at, b.created_at) AS created_at,
    COALESCE(f.seq, h.last + count(*) FILTER (WHERE f.seq IS NULL) OVER (ORDER BY b.k)) AS seq
  FROM batch b CROSS JOIN head h LEFT JOIN found f ON f.id = b.id
  WHERE b.part = 0
), written AS (
  INSERT INTO {p}entries (session, log, seq, part, id, data, created_at)
  SELECT ?, ?, p.seq, b.part, CASE WHEN b.part = 0 THEN b.id END, b.data, p.created_at
  FROM batch b JOIN placed p USING (k)
  ON CONFLICT (session, log, seq, part)
  DO UPDATE SET id = excluded.id, data = excluded.data, created_at = excluded.created_at
), trimmed AS (  -- rows of replaced entries past their new last part: a probe per entry, then by row address
  DELETE FROM {p}entries WHERE ctid = ANY(ARRAY(
    SELECT old.ctid FROM placed p CROSS JOIN LATERAL (
      SELECT ctid FROM {p}entries WHERE session = ? AND log = ? AND seq = p.seq AND part >= p.parts OFFSET 0) old
    WHERE NOT p.new))
), moved AS (
  UPDATE {p}logs SET last = (SELECT max(seq) FROM placed WHERE new)
  WHERE session = ? AND log = ? AND EXISTS (SELECT FROM placed WHERE new)
)
SELECT seq FROM placed WHERE k = ?
"""
"""PostgreSQL only: a whole append in one statement, run right after ``lock_log`` in one round trip.

It must come after the lock in a statement of its own: under READ COMMITTED a statement sees what
was committed before it began, so only a statement begun after the head-row lock was granted sees
the entries of the writer that held it (the ids to replace, and the head's end). ``batch`` holds
one row per chunk, entries numbered ``k`` in order with ids already unique; an entry whose id is
in the log takes its position and creation time (``found``), the others take the next positions.
Replaced rows are overwritten by ``ON CONFLICT``, and parts beyond the new entry's last are deleted.
"""

_APPEND_NEW = """
WITH head AS (
  INSERT INTO {p}logs (session, log, last) VALUES (?, ?, ?)
  ON CONFLICT (session, log) DO UPDATE SET last = {p}logs.last + excluded.last RETURNING last
), written AS (
  INSERT INTO {p}entries (session, log, seq, part, id, data, created_at)
  SELECT ?, ?, h.last - ? + b.k, b.part, NULL, b.data, b.created_at
  FROM head h CROSS JOIN unnest(?::int[], ?::int[], ?::bytea[], ?::bigint[]) AS b (k, part, data, created_at)
)
SELECT last FROM head
"""
"""PostgreSQL only: an append of entries without ids (the usual kind) in one statement.

It reads no entries, so it needs no fresh snapshot: ``ON CONFLICT DO UPDATE`` waits for the head
row's lock and moves the end from the row's latest version, and the entries take the positions
just before the new end.
"""

_APPEND_ONE = """
WITH head AS (
  INSERT INTO {p}logs (session, log, last) VALUES (?, ?, 1)
  ON CONFLICT (session, log) DO UPDATE SET last = {p}logs.last + 1 RETURNING last
)
INSERT INTO {p}entries (session, log, seq, part, id, data, created_at)
SELECT ?, ?, h.last, 0, NULL, ?, ? FROM head h RETURNING seq
"""
"""PostgreSQL only: ``append_new`` for the commonest append, one entry without an id in one row.

Plain parameters instead of arrays: measured, the arrays cost about a quarter of the statement's
time (psycopg adapts each element in Python; the server builds and unnests them).
"""


def component(prefix: str) -> str:
    """The migration component of one prefix: each prefix has its own schema version."""
    return f"harness:{prefix}"


def steps(prefix: str, dialect: Dialect) -> list[str]:
    return [step.format(p=prefix, **_TYPES[dialect]) for step in STEPS]


@dataclass(frozen=True)
class Sql:
    """The statements of one prefix in one dialect."""

    dialect: Dialect
    create_session: str
    session: str
    sessions: str
    set_session_state: str
    delete_operations: str
    logs_of_session: str
    delete_session: str
    enqueue: str
    operation: str
    operations: str
    transition: str
    settle: str
    delete_operation: str
    delete_settled: str
    set_operation_meta: str
    lock_log: str
    set_end: str
    end: str
    entry_seq: str
    delete_entry: str
    insert_chunk: str
    insert_entry: str
    write_batch: str
    append_new: str
    append_one: str
    read: str
    read_all: str
    entry: str
    clear: tuple[str, ...]

    @classmethod
    def build(cls, p: str, dialect: Dialect) -> Sql:
        texts = {name: _param(text, dialect) for name, text in _texts(p, dialect).items()}
        return cls(dialect, **texts)  # type: ignore[arg-type]

    def operations_where(self, session: bool, statuses: int) -> str:
        """``operations`` narrowed to one session and to ``statuses`` statuses (neither: all)."""
        where = ["session = ?"] if session else []
        if statuses:
            where.append(f"status IN ({', '.join('?' * statuses)})")
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        return str(_param(self.operations.replace("/*where*/", clause), self.dialect))


def _param(text: str | tuple[str, ...], dialect: Dialect) -> str | tuple[str, ...]:
    if isinstance(text, tuple):
        return tuple(str(_param(one, dialect)) for one in text)
    return text.replace("?", "%s") if dialect == "postgres" else text


def _texts(p: str, dialect: Dialect) -> dict[str, str | tuple[str, ...]]:
    return {
        "create_session": (
            f"INSERT INTO {p}sessions ({_SESSION}) VALUES (?, ?, ?, ?, ?) "
            f"ON CONFLICT (id) DO NOTHING RETURNING {_SESSION}"
        ),
        "session": f"SELECT {_SESSION} FROM {p}sessions WHERE id = ?",
        "sessions": f"SELECT {_SESSION} FROM {p}sessions ORDER BY created_at, id",
        "set_session_state": f"UPDATE {p}sessions SET state = ?, updated_at = ? WHERE id = ?",
        "delete_operations": f"DELETE FROM {p}operations WHERE session = ?",
        "logs_of_session": (  # PostgreSQL: lock the heads (in one order: no deadlock), so appends wait
            f"SELECT log FROM {p}logs WHERE session = ? ORDER BY log" + (" FOR UPDATE" if dialect == "postgres" else "")
        ),
        "delete_session": f"DELETE FROM {p}sessions WHERE id = ?",
        "enqueue": (
            f"INSERT INTO {p}operations (session, id, status, input, meta, result, reason, created_at, settled_at) "
            "VALUES (?, ?, 'queued', ?, ?, 'null', NULL, ?, NULL) "
            f"ON CONFLICT (session, id) DO NOTHING RETURNING {_OPERATION}"
        ),
        "operation": f"SELECT {_OPERATION} FROM {p}operations WHERE session = ? AND id = ?",
        "operations": f"SELECT {_OPERATION} FROM {p}operations /*where*/ ORDER BY seq",
        "transition": f"UPDATE {p}operations SET status = ? WHERE session = ? AND id = ? AND status = ?",
        "settle": (
            f"UPDATE {p}operations SET status = ?, result = ?, reason = ?, settled_at = ? "
            "WHERE session = ? AND id = ? AND status IN ('queued', 'running')"
        ),
        "delete_operation": f"DELETE FROM {p}operations WHERE session = ? AND id = ?",
        "delete_settled": f"DELETE FROM {p}operations WHERE session = ? AND status IN ('done', 'unanswered')",
        "set_operation_meta": f"UPDATE {p}operations SET meta = ? WHERE session = ? AND id = ?",
        "lock_log": (
            f"INSERT INTO {p}logs (session, log, last) VALUES (?, ?, 0) "
            f"ON CONFLICT (session, log) DO UPDATE SET last = {p}logs.last RETURNING last"
        ),
        "set_end": (
            f"INSERT INTO {p}logs (session, log, last) VALUES (?, ?, ?) "
            "ON CONFLICT (session, log) DO UPDATE SET last = excluded.last"
        ),
        "end": f"SELECT last FROM {p}logs WHERE session = ? AND log = ?",
        "entry_seq": f"SELECT seq, created_at FROM {p}entries WHERE session = ? AND log = ? AND id = ?",
        "delete_entry": f"DELETE FROM {p}entries WHERE session = ? AND log = ? AND seq = ?",
        "insert_chunk": f"INSERT INTO {p}entries ({_ENTRY}, session, log) VALUES (?, ?, ?, ?, ?, ?, ?)",
        "insert_entry": (  # a new entry in one row: literals for part and id, two parameters fewer per row
            f"INSERT INTO {p}entries ({_ENTRY}, session, log) VALUES (?, 0, NULL, ?, ?, ?, ?)"
        ),
        "write_batch": _WRITE_BATCH.format(p=p),
        "append_new": _APPEND_NEW.format(p=p),
        "append_one": _APPEND_ONE.format(p=p),
        "read": (  # a range up to the limit-th entry's seq (one index probe), not a semi-join per row
            f"SELECT {_ENTRY} FROM {p}entries WHERE session = ? AND log = ? AND seq > ? AND seq <= COALESCE(("
            f"SELECT seq FROM {p}entries WHERE session = ? AND log = ? AND part = 0 AND seq > ? "
            f"ORDER BY seq LIMIT 1 OFFSET ?), {NO_LIMIT}) ORDER BY seq, part"
        ),
        "read_all": f"SELECT {_ENTRY} FROM {p}entries WHERE session = ? AND log = ? AND seq > ? ORDER BY seq, part",
        "entry": (
            f"SELECT {_ENTRY} FROM {p}entries WHERE session = ? AND log = ? AND seq = ("
            f"SELECT seq FROM {p}entries WHERE session = ? AND log = ? AND id = ?) ORDER BY part"
        ),
        "clear": (
            f"DELETE FROM {p}logs WHERE session = ? AND log = ?",
            f"DELETE FROM {p}entries WHERE session = ? AND log = ?",
        ),
    }
