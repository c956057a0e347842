"""``HarnessStore``: durable sessions, idempotent operations and named logs for an agent harness.

A port of the seed's Durable Object store (seeds/004) to SQLite files shared by several processes,
PostgreSQL and an in-process memory database. Each method checks and encodes its arguments here
(no I/O), then makes one call of the store's harness facet (``stores.base.HarnessFacet``), which
runs it atomically with its guards inside the writing statements; rows come back as records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar, overload

import orjson

from ..clock import now_ms
from ..errors import InvalidRequest, StoreClosed
from ..stores.base import EntryRow, HarnessFacet, Pending, Row
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
)

T = TypeVar("T")


class HarnessStore:
    """The store; open it with ``open_harness_store``. Synchronous; safe to share between threads."""

    def __init__(self, facet: HarnessFacet, prefix: str, chunk_size: int, close: Callable[[], None]) -> None:
        self._facet: HarnessFacet | None = facet
        self._close = close
        self.prefix = prefix
        self.chunk_size = chunk_size

    @property
    def _db(self) -> HarnessFacet:
        """The store's facet; ``StoreClosed`` once the store is closed."""
        if self._facet is None:
            raise StoreClosed("this harness store is closed: open it again to use it")
        return self._facet

    def close(self) -> None:
        """Close the store; again is a no-op, and every call after it raises ``StoreClosed``."""
        if self._facet is not None:
            self._facet = None
            self._close()

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
        return _session(self._db.create_session(id, parent, encode_value(state, "state"), when, now))

    def session(self, id: str) -> SessionRecord | None:
        """One session, or None."""
        row = self._db.session(check_id(id, "session id"))
        return None if row is None else _session(row)

    def sessions(self) -> list[SessionRecord]:
        """Every session, oldest first (by ``created_at``, then id)."""
        return [_session(row) for row in self._db.sessions()]

    def set_session_state(self, id: str, state: Any) -> bool:
        """Replace a session's harness-owned state; False when there is no such session."""
        return self._db.set_session_state(check_id(id, "session id"), encode_value(state, "state"), now_ms())

    def delete_session(self, id: str) -> bool:
        """Delete a session with its operations and logs; False when there was no such session."""
        return self._db.delete_session(check_id(id, "session id"))

    # ── Operations ───────────────────────────────────────────────────────────

    def enqueue(self, session: str, id: str, input: Any, meta: Any = None) -> Enqueued:
        """Durably queue an operation, idempotent on ``(session, id)``.

        A second enqueue with the same id stores nothing and returns the first record with
        ``accepted`` False, also when several processes race on it. ``seq`` comes from the
        database's counter: increasing in submission order, never reused, possibly with gaps.
        """
        key = _op_key(session, id)
        row, accepted = self._db.enqueue(*key, encode_value(input, "input"), encode_value(meta, "meta"), now_ms())
        return Enqueued(_operation(row), accepted)

    def operation(self, session: str, id: str) -> OperationRecord | None:
        """One operation, or None."""
        row = self._db.operation(*_op_key(session, id))
        return None if row is None else _operation(row)

    def operations(
        self, session: str | None = None, status: OperationStatus | Iterable[OperationStatus] | None = None
    ) -> list[OperationRecord]:
        """Operations in submission order, optionally of one session and with some statuses."""
        statuses = check_statuses(status)
        if statuses == ():
            return []
        owner = None if session is None else check_id(session, "session id")
        return [_operation(row) for row in self._db.operations(owner, statuses)]

    def start(self, session: str, id: str) -> bool:
        """Move a queued operation to running; False (and no change) when it was not queued."""
        return self._db.transition(*_op_key(session, id), "queued", "running")

    def requeue(self, session: str, id: str) -> bool:
        """Move a running operation back to queued; False (and no change) when it was not running."""
        return self._db.transition(*_op_key(session, id), "running", "queued")

    def settle(self, session: str, id: str, outcome: OperationOutcome) -> bool:
        """Settle a queued or running operation; False when it had already settled or does not exist."""
        status, result, reason = check_outcome(outcome)
        return self._db.settle(*_op_key(session, id), status, result, reason, now_ms())

    def delete_operation(self, session: str, id: str) -> bool:
        """Delete one operation whatever its status (its id may be enqueued again); False when absent."""
        return self._db.delete_operation(*_op_key(session, id))

    def delete_settled(self, session: str) -> int:
        """Forget a session's settled operations, keeping open ones; how many were deleted."""
        return self._db.delete_settled(check_id(session, "session id"))

    def set_operation_meta(self, session: str, id: str, meta: Any) -> bool:
        """Replace an operation's harness-owned bookkeeping; False when there is no such operation."""
        return self._db.set_operation_meta(*_op_key(session, id), encode_value(meta, "meta"))

    # ── Logs ─────────────────────────────────────────────────────────────────

    def append(self, session: str, log: str, entries: Sequence[LogAppend]) -> int:
        """Append entries in order, atomically; an entry whose id is in the log replaces it in place.

        Returns the position of the last entry written (a replaced entry keeps its position), or
        the log's end when ``entries`` is empty.
        """
        key = _log_key(session, log)
        if not isinstance(entries, list | tuple):
            raise InvalidRequest("entries must be a list of LogAppend")
        pending: list[Pending] = [(entry_id, data, None) for entry_id, data in encode_entries(entries)]
        if not pending:
            return self._db.end(*key)
        return self._db.append(*key, pending, now_ms())

    def read(self, session: str, log: str, after: int = 0, limit: int | None = None) -> list[LogEntry]:
        """Entries after position ``after`` (exclusive), in order, at most ``limit`` (None: all)."""
        key = _log_key(session, log)
        check_position(after, "after")
        if limit is not None and check_position(limit, "limit") == 0:
            return []
        return [_entry(row) for row in self._db.read(*key, after, limit)]

    def entry(self, session: str, log: str, id: str) -> LogEntry | None:
        """One entry by id, or None."""
        row = self._db.entry(*_log_key(session, log), check_id(id, "entry id"))
        return None if row is None else _entry(row)

    def end(self, session: str, log: str) -> int:
        """The position of the log's last entry, 0 for an empty log."""
        return self._db.end(*_log_key(session, log))

    def clear(self, session: str, log: str) -> None:
        """Empty a session's log; its positions start again from 1."""
        self._db.clear(*_log_key(session, log))

    def copy(self, source: str, target: str, log: str) -> None:
        """Append ``source``'s log to the end of ``target``'s, keeping ids and creation times.

        Ids stay unique within a log: a copied entry whose id the target already has replaces
        that entry in place, as ``append`` does. Atomic.
        """
        _log_key(source, log)
        _log_key(target, log)
        self._db.copy(source, target, log, now_ms())


def _op_key(session: str, id: str) -> tuple[str, str]:
    return check_id(session, "session id"), check_id(id, "operation id")


def _log_key(session: str, log: str) -> tuple[str, str]:
    return check_id(session, "session id"), check_id(log, "log name")


def _session(row: Row) -> SessionRecord:
    id, parent, state, created_at, updated_at = row
    return SessionRecord(id, parent, orjson.loads(state), created_at, updated_at)


def _operation(row: Row) -> OperationRecord:
    session, id, seq, status, input, meta, result, reason, created_at, settled_at = row
    return OperationRecord(
        session,
        id,
        seq,
        status,
        orjson.loads(input),
        orjson.loads(meta),
        orjson.loads(result),
        reason,
        created_at,
        settled_at,
    )


def _entry(row: EntryRow) -> LogEntry:
    seq, entry_id, data, created_at = row
    return LogEntry(seq, entry_id, orjson.loads(data), created_at)
