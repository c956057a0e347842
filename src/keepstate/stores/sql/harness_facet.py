"""The harness facet on any SQL engine: the store's statements run, guarded, in as few round trips as can be.

Written once for SQLite, PostgreSQL and the in-process memory database (all three run the same SQL,
``sql/harness.py``, through an ``Engine``). Guards live inside the writing statements, never in a
read followed by a write, so they hold when several processes race: a transition is an ``UPDATE …
WHERE status = …``, enqueue is an ``INSERT … ON CONFLICT DO NOTHING``, and a log's writers queue on
the log's head row. Arguments arrive checked and encoded by ``keepstate.harness``; rows go back as
tuples for it to turn into records.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...errors import Unavailable
from ..base import EntryRow, HarnessFacet, Pending
from .engine import Engine, Row, Tx
from .harness import Sql, component, steps
from .harness_rows import join_chunks, plan_batch, split_chunks

_RACE_RETRIES = 20


class SqlHarness(HarnessFacet):
    """The harness tables of one prefix on one engine."""

    def __init__(self, engine: Engine, prefix: str, chunk_size: int) -> None:
        engine.migrate(component(prefix), steps(prefix, engine.dialect))
        self._db = engine
        self._sql = Sql.build(prefix, engine.dialect)
        self.chunk_size = chunk_size

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._db.transaction():
            yield

    # ── Sessions ─────────────────────────────────────────────────────────────

    def create_session(self, id: str, parent: str | None, state: str, created_at: int, now: int) -> Row:
        with self._db.statement() as tx:
            row, _ = _insert_or_get(
                tx, self._sql.create_session, (id, parent, state, created_at, now), self._sql.session, (id,)
            )
        return row

    def session(self, id: str) -> Row | None:
        rows = self._rows(self._sql.session, (id,))
        return rows[0] if rows else None

    def sessions(self) -> list[Row]:
        return self._rows(self._sql.sessions)

    def set_session_state(self, id: str, state: str, now: int) -> bool:
        return self._run(self._sql.set_session_state, (state, now, id)) > 0

    def delete_session(self, id: str) -> bool:
        with self._db.transaction() as tx:
            tx.run(self._sql.delete_operations, (id,))
            for (log,) in tx.rows(self._sql.logs_of_session, (id,)):
                self._clear(tx, (id, log))
            return tx.run(self._sql.delete_session, (id,)) > 0

    # ── Operations ───────────────────────────────────────────────────────────

    def enqueue(self, session: str, id: str, input: str, meta: str, now: int) -> tuple[Row, bool]:
        with self._db.statement() as tx:
            return _insert_or_get(
                tx, self._sql.enqueue, (session, id, input, meta, now), self._sql.operation, (session, id)
            )

    def operation(self, session: str, id: str) -> Row | None:
        rows = self._rows(self._sql.operation, (session, id))
        return rows[0] if rows else None

    def operations(self, session: str | None, statuses: Sequence[str] | None) -> list[Row]:
        params = ([] if session is None else [session]) + list(statuses or ())
        return self._rows(self._sql.operations_where(session is not None, len(statuses or ())), params)

    def transition(self, session: str, id: str, source: str, target: str) -> bool:
        return self._run(self._sql.transition, (target, session, id, source)) > 0

    def settle(self, session: str, id: str, status: str, result: str, reason: str | None, now: int) -> bool:
        return self._run(self._sql.settle, (status, result, reason, now, session, id)) > 0

    def delete_operation(self, session: str, id: str) -> bool:
        return self._run(self._sql.delete_operation, (session, id)) > 0

    def delete_settled(self, session: str) -> int:
        return self._run(self._sql.delete_settled, (session,))

    def set_operation_meta(self, session: str, id: str, meta: str) -> bool:
        return self._run(self._sql.set_operation_meta, (meta, session, id)) > 0

    # ── Logs ─────────────────────────────────────────────────────────────────

    def append(self, session: str, log: str, pending: Sequence[Pending], now: int) -> int:
        if self._sql.dialect == "postgres":
            return self._write_batch(session, log, pending, now)
        with self._db.transaction() as tx:
            return self._write_entries(tx, session, log, pending, now)

    def read(self, session: str, log: str, after: int, limit: int | None) -> list[EntryRow]:
        if limit is None:
            return list(join_chunks(self._rows(self._sql.read_all, (session, log, after))))
        return list(join_chunks(self._rows(self._sql.read, (session, log, after, session, log, after, limit - 1))))

    def entry(self, session: str, log: str, id: str) -> EntryRow | None:
        found = list(join_chunks(self._rows(self._sql.entry, (session, log, session, log, id))))
        return found[0] if found else None

    def end(self, session: str, log: str) -> int:
        rows = self._rows(self._sql.end, (session, log))
        return int(rows[0][0]) if rows else 0

    def clear(self, session: str, log: str) -> None:
        with self._db.transaction() as tx:
            self._clear(tx, (session, log))

    def _clear(self, tx: Tx, key: tuple[str, str]) -> None:
        """Delete one log, head row and entries, its head taken first (created if the log has none).

        Appends in flight on the log finish before the deletes, and later ones wait for them. On
        PostgreSQL an append could otherwise create the head row between the two deletes: its first
        entry would go while its head stayed, and the log would go on from 2. A log that
        ``delete_session`` did not list (created meanwhile) is left whole: its append came after."""
        tx.rows(self._sql.lock_log, key)
        for statement in self._sql.clear:
            tx.run(statement, key)

    def copy(self, source: str, target: str, log: str, now: int) -> None:
        with self._db.transaction() as tx:
            rows = tx.rows(self._sql.read_all, (source, log, 0))
            pending = [(entry_id, data, created) for _, entry_id, data, created in join_chunks(rows)]
            if pending:
                self.append(target, log, pending, now)

    def _write_batch(self, session: str, log: str, pending: Sequence[Pending], now: int) -> int:
        """PostgreSQL: one statement for new entries; with ids, lock the head then write (one round trip)."""
        key = (session, log)
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
            batch.k,
            batch.part,
            batch.parts,
            batch.id,
            batch.data,
            batch.created_at,
            *key,
            batch.ids,
            *key,
            *key,
            *key,
            *key,
            batch.last,
        )
        rows = self._db.atomic([(self._sql.lock_log, key), (self._sql.write_batch, params)])
        return int(rows[0][0])

    def _write_entries(self, tx: Tx, session: str, log: str, pending: Sequence[Pending], now: int) -> int:
        """SQLite: write entries under the write lock, new rows in one ``executemany``; the position
        of the last one written. Rows queued so far are flushed before an id is looked up, so an id
        given twice in one call finds its first entry."""
        key = (session, log)
        head = tx.rows(self._sql.end, key)  # the write transaction already keeps other writers out
        end = start = int(head[0][0]) if head else 0
        last = end
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
        return [
            (seq, part, entry_id if part == 0 else None, chunk, at, *key)
            for part, chunk in enumerate(split_chunks(data, self.chunk_size))
        ]

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._db.snapshot() as tx:
            return tx.rows(sql, params)

    def _run(self, sql: str, params: Sequence[Any]) -> int:
        with self._db.statement() as tx:
            return tx.run(sql, params)


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
