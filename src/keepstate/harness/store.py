"""``HarnessStore``: durable sessions, idempotent operations and named logs for an agent harness.

A port of the seed's Durable Object store (seeds/004) to SQLite files shared by several processes,
PostgreSQL and an in-process memory database. Each method validates and encodes its arguments
first (no I/O), then runs in one transaction of the engine (``engines.py``), with its SQL from
``schema.py``. Guards live inside the writing statements, never in a read followed by a write, so
they hold when several processes race: a transition is an ``UPDATE … WHERE status = …``, enqueue is
an ``INSERT … ON CONFLICT DO NOTHING``, and a log's writers queue on the log's head row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar, overload

import orjson

from ..errors import InvalidRequest, Unavailable
from .engines import Engine, Row, Tx
from .records import (
    Enqueued,
    LogAppend,
    LogEntry,
    OperationOutcome,
    OperationRecord,
    OperationStatus,
    SessionRecord,
    check_id,
    check_outcome,
    check_position,
    check_statuses,
    encode_entries,
    encode_value,
    join_chunks,
    now_ms,
    plan_batch,
    split_chunks,
)
from .schema import Sql

T = TypeVar("T")
_RACE_RETRIES = 20
_Pending = tuple[str | None, bytes, int | None]
"""An entry on its way into a log: id, JSON bytes, creation time (None: now)."""


class HarnessStore:
    """The store; open it with ``open_harness_store``. Synchronous; safe to share between threads."""

    def __init__(self, engine: Engine, prefix: str, chunk_size: int) -> None:
        self._db = engine
        self._sql = Sql.build(prefix, engine.dialect)
        self.prefix = prefix
        self.chunk_size = chunk_size

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> HarnessStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ── Transactions ─────────────────────────────────────────────────────────

    @overload
    def transaction(self) -> AbstractContextManager[None]: ...

    @overload
    def transaction(self, fn: Callable[[], T]) -> T: ...

    def transaction(self, fn: Callable[[], T] | None = None) -> Any:
        """Group this thread's writes: they commit together or not at all.

        ``with store.transaction(): ...`` or ``store.transaction(fn)`` (returns what ``fn`` returns).
        An exception rolls everything back and propagates. Transactions nest (inner ones are
        savepoints). Keep them short: on SQLite a write transaction holds the file's write lock.
        """
        if fn is None:
            return self._scope()
        with self._db.transaction():
            return fn()

    @contextmanager
    def _scope(self) -> Iterator[None]:
        with self._db.transaction():
            yield

    # ── Sessions ─────────────────────────────────────────────────────────────

    def create_session(
        self, id: str, parent: str | None = None, state: Any = None, created_at: int | None = None
    ) -> SessionRecord:
        """Create a session, or return the existing one with this id unchanged.

        ``created_at`` (ms since the epoch) keeps the creation time of an imported session, so
        ``sessions()`` stays in creation order; default now.
        """
        check_id(id, "session id")
        if parent is not None:
            check_id(parent, "parent")
        now = now_ms()
        when = now if created_at is None else check_position(created_at, "created_at")
        params = (id, parent, encode_value(state, "state"), when, now)
        with self._db.statement() as tx:
            row, _ = _insert_or_get(tx, self._sql.create_session, params, self._sql.session, (id,))
        return _session(row)

    def session(self, id: str) -> SessionRecord | None:
        """One session, or None."""
        rows = self._rows(self._sql.session, (check_id(id, "session id"),))
        return _session(rows[0]) if rows else None

    def sessions(self) -> list[SessionRecord]:
        """Every session, oldest first (by ``created_at``, then id)."""
        return [_session(row) for row in self._rows(self._sql.sessions)]

    def set_session_state(self, id: str, state: Any) -> bool:
        """Replace a session's harness-owned state; False when there is no such session."""
        params = (encode_value(state, "state"), now_ms(), check_id(id, "session id"))
        return self._run(self._sql.set_session_state, params) > 0

    def delete_session(self, id: str) -> bool:
        """Delete a session with its operations and logs; False when there was no such session."""
        check_id(id, "session id")
        with self._db.transaction() as tx:
            tx.run(self._sql.delete_operations, (id,))
            for (log,) in tx.rows(self._sql.logs_of_session, (id,)):
                self._clear(tx, (id, log))
            return tx.run(self._sql.delete_session, (id,)) > 0

    # ── Operations ───────────────────────────────────────────────────────────

    def enqueue(self, session: str, id: str, input: Any, meta: Any = None) -> Enqueued:
        """Durably queue an operation, idempotent on ``(session, id)``.

        A second enqueue with the same id stores nothing and returns the first record with
        ``accepted`` False, also when several processes race on it. ``seq`` comes from the
        database's counter: increasing in submission order, never reused, possibly with gaps.
        """
        key = _op_key(session, id)
        params = (*key, encode_value(input, "input"), encode_value(meta, "meta"), now_ms())
        with self._db.statement() as tx:
            row, accepted = _insert_or_get(tx, self._sql.enqueue, params, self._sql.operation, key)
        return Enqueued(_operation(row), accepted)

    def operation(self, session: str, id: str) -> OperationRecord | None:
        """One operation, or None."""
        rows = self._rows(self._sql.operation, _op_key(session, id))
        return _operation(rows[0]) if rows else None

    def operations(
        self, session: str | None = None, status: OperationStatus | Iterable[OperationStatus] | None = None
    ) -> list[OperationRecord]:
        """Operations in submission order, optionally of one session and with some statuses."""
        statuses = check_statuses(status)
        if statuses == ():
            return []
        params = ([] if session is None else [check_id(session, "session id")]) + list(statuses or ())
        query = self._sql.operations_where(session is not None, len(statuses or ()))
        return [_operation(row) for row in self._rows(query, params)]

    def start(self, session: str, id: str) -> bool:
        """Move a queued operation to running; False (and no change) when it was not queued."""
        return self._transition(session, id, "queued", "running")

    def requeue(self, session: str, id: str) -> bool:
        """Move a running operation back to queued; False (and no change) when it was not running."""
        return self._transition(session, id, "running", "queued")

    def settle(self, session: str, id: str, outcome: OperationOutcome) -> bool:
        """Settle a queued or running operation; False when it had already settled or does not exist."""
        status, result, reason = check_outcome(outcome)
        key = _op_key(session, id)
        return self._run(self._sql.settle, (status, result, reason, now_ms(), *key)) > 0

    def delete_operation(self, session: str, id: str) -> bool:
        """Delete one operation whatever its status (its id may be enqueued again); False when absent."""
        return self._run(self._sql.delete_operation, _op_key(session, id)) > 0

    def delete_settled(self, session: str) -> int:
        """Forget a session's settled operations, keeping open ones; how many were deleted."""
        return self._run(self._sql.delete_settled, (check_id(session, "session id"),))

    def set_operation_meta(self, session: str, id: str, meta: Any) -> bool:
        """Replace an operation's harness-owned bookkeeping; False when there is no such operation."""
        params = (encode_value(meta, "meta"), *_op_key(session, id))
        return self._run(self._sql.set_operation_meta, params) > 0

    def _transition(self, session: str, id: str, source: OperationStatus, target: OperationStatus) -> bool:
        params = (target, *_op_key(session, id), source)
        return self._run(self._sql.transition, params) > 0

    # ── Logs ─────────────────────────────────────────────────────────────────

    def append(self, session: str, log: str, entries: Sequence[LogAppend]) -> int:
        """Append entries in order, atomically; an entry whose id is in the log replaces it in place.

        Returns the position of the last entry written (a replaced entry keeps its position), or
        the log's end when ``entries`` is empty.
        """
        self._check_log(session, log)
        if not isinstance(entries, list | tuple):
            raise InvalidRequest("entries must be a list of LogAppend")
        pending: list[_Pending] = [(entry_id, data, None) for entry_id, data in encode_entries(entries)]
        if not pending:
            return self.end(session, log)
        return self._write(session, log, pending)

    def read(self, session: str, log: str, after: int = 0, limit: int | None = None) -> list[LogEntry]:
        """Entries after position ``after`` (exclusive), in order, at most ``limit`` (None: all)."""
        self._check_log(session, log)
        check_position(after, "after")
        if limit is None:
            return _entries(self._rows(self._sql.read_all, (session, log, after)))
        if check_position(limit, "limit") == 0:
            return []
        return _entries(self._rows(self._sql.read, (session, log, after, session, log, after, limit - 1)))

    def entry(self, session: str, log: str, id: str) -> LogEntry | None:
        """One entry by id, or None."""
        self._check_log(session, log)
        entries = _entries(self._rows(self._sql.entry, (session, log, session, log, check_id(id, "entry id"))))
        return entries[0] if entries else None

    def end(self, session: str, log: str) -> int:
        """The position of the log's last entry, 0 for an empty log."""
        rows = self._rows(self._sql.end, self._check_log(session, log))
        return int(rows[0][0]) if rows else 0

    def clear(self, session: str, log: str) -> None:
        """Empty a session's log; its positions start again from 1."""
        key = self._check_log(session, log)
        with self._db.transaction() as tx:
            self._clear(tx, key)

    def _clear(self, tx: Tx, key: tuple[str, str]) -> None:
        """Delete one log, head row and entries, its head taken first (created if the log has none).

        Appends in flight on the log finish before the deletes, and later ones wait for them. On
        PostgreSQL an append could otherwise create the head row between the two deletes: its first
        entry would go while its head stayed, and the log would go on from 2. A log that
        ``delete_session`` did not list (created meanwhile) is left whole: its append came after."""
        tx.rows(self._sql.lock_log, key)
        for statement in self._sql.clear:
            tx.run(statement, key)

    def copy(self, source: str, target: str, log: str) -> None:
        """Append ``source``'s log to the end of ``target``'s, keeping ids and creation times.

        Ids stay unique within a log: a copied entry whose id the target already has replaces
        that entry in place, as ``append`` does. Atomic.
        """
        self._check_log(source, log)
        self._check_log(target, log)
        with self._db.transaction() as tx:
            rows = tx.rows(self._sql.read_all, (source, log, 0))
            pending = [(entry_id, data, created) for _, entry_id, data, created in join_chunks(rows)]
            if pending:
                self._write(target, log, pending)

    def _write(self, session: str, log: str, pending: Sequence[_Pending]) -> int:
        """Write entries atomically; the position of the last one written."""
        if self._sql.dialect == "postgres":
            return self._write_batch(session, log, pending)
        with self._db.transaction() as tx:
            return self._write_entries(tx, session, log, pending)

    def _write_batch(self, session: str, log: str, pending: Sequence[_Pending]) -> int:
        """PostgreSQL: one statement for new entries; with ids, lock the head then write (one round trip)."""
        key, now = (session, log), now_ms()
        batch = plan_batch(((i, data, now if at is None else at) for i, data, at in pending), self.chunk_size)
        params: tuple[Any, ...]
        if not batch.ids:
            count = batch.k[-1]
            sql = self._sql.append_new
            params = (*key, count, *key, count, batch.k, batch.part, batch.data, batch.created_at)
            if len(batch.k) == 1:  # one entry in one row: the common case, with plain parameters
                sql, params = self._sql.append_one, (*key, *key, batch.data[0], batch.created_at[0])
            with self._db.statement() as tx:
                return int(tx.rows(sql, params)[0][0])
        params = (
            batch.k, batch.part, batch.parts, batch.id, batch.data, batch.created_at,
            *key, batch.ids, *key, *key, *key, *key, batch.last,
        )
        rows = self._db.atomic([(self._sql.lock_log, key), (self._sql.write_batch, params)])
        return int(rows[0][0])

    def _write_entries(self, tx: Tx, session: str, log: str, pending: Sequence[_Pending]) -> int:
        """SQLite: write entries under the write lock, new rows in one ``executemany``; the position
        of the last one written. Rows queued so far are flushed before an id is looked up, so an id
        given twice in one call finds its first entry."""
        key = (session, log)
        head = tx.rows(self._sql.end, key)  # the write transaction already keeps other writers out
        end = start = int(head[0][0]) if head else 0
        last, now = end, now_ms()
        if all(entry_id is None and len(data) <= self.chunk_size for entry_id, data, _ in pending):
            # the usual append, new entries of one row each: their rows in one pass
            rows = [(start + k, data, now if at is None else at, *key) for k, (_, data, at) in enumerate(pending, 1)]
            tx.many(self._sql.insert_entry, rows)
            tx.run(self._sql.set_end, (*key, start + len(rows)))
            return start + len(rows)
        queued: list[Row] = []
        for entry_id, data, created_at in pending:
            found: list[Row] = []
            if entry_id is not None:
                tx.many(self._sql.insert_chunk, queued)
                queued = []
                found = tx.rows(self._sql.entry_seq, (*key, entry_id))
            if found:  # replace in place: same position, same creation time
                last, created_at = int(found[0][0]), int(found[0][1])
                tx.run(self._sql.delete_entry, (*key, last))
            else:
                end += 1
                last = end
            queued += self._chunk_rows(key, last, entry_id, data, now if created_at is None else created_at)
        tx.many(self._sql.insert_chunk, queued)
        if end != start:
            tx.run(self._sql.set_end, (*key, end))
        return last

    def _chunk_rows(self, key: tuple[str, str], seq: int, entry_id: str | None, data: bytes, at: int) -> list[Row]:
        return [(seq, part, entry_id if part == 0 else None, chunk, at, *key)
                for part, chunk in enumerate(split_chunks(data, self.chunk_size))]

    @staticmethod
    def _check_log(session: str, log: str) -> tuple[str, str]:
        return check_id(session, "session id"), check_id(log, "log name")

    # ── Plumbing ─────────────────────────────────────────────────────────────

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._db.snapshot() as tx:
            return tx.rows(sql, params)

    def _run(self, sql: str, params: Sequence[Any]) -> int:
        with self._db.statement() as tx:
            return tx.run(sql, params)


def _op_key(session: str, id: str) -> tuple[str, str]:
    return check_id(session, "session id"), check_id(id, "operation id")


def _insert_or_get(tx: Tx, insert: str, params: Sequence[Any], select: str, key: Sequence[Any]) -> tuple[Row, bool]:
    """Insert unless the key exists; ``(row, inserted)``. Retries if a racing delete removes the row."""
    for _ in range(_RACE_RETRIES):
        rows = tx.rows(insert, params)
        if rows:
            return rows[0], True
        rows = tx.rows(select, key)
        if rows:
            return rows[0], False
    raise Unavailable("the store kept changing under an insert; retry")


def _session(row: Row) -> SessionRecord:
    id, parent, state, created_at, updated_at = row
    return SessionRecord(id, parent, orjson.loads(state), created_at, updated_at)


def _operation(row: Row) -> OperationRecord:
    session, id, seq, status, input, meta, result, reason, created_at, settled_at = row
    return OperationRecord(
        session, id, seq, status, orjson.loads(input), orjson.loads(meta), orjson.loads(result),
        reason, created_at, settled_at,
    )


def _entries(rows: Iterable[Row]) -> list[LogEntry]:
    return [
        LogEntry(seq, entry_id, orjson.loads(data), created_at)
        for seq, entry_id, data, created_at in join_chunks(rows)
    ]
