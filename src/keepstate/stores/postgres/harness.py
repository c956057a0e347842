"""The harness facet's engine on PostgreSQL: a sync connection pool, one connection per transaction.

Built on ``db.py`` (pool, error translation, migrations under an advisory lock). Outside a
transaction each statement borrows a pooled autocommit connection; inside one, the thread keeps its
connection until the outermost transaction ends, and inner transactions are
psycopg savepoints. READ COMMITTED is enough: every guard is inside the writing statement
(``UPDATE … WHERE status = …``, ``INSERT … ON CONFLICT``), and writers of one log queue on its
head row's lock. ``atomic`` pipelines a log append's two statements (lock the head, then write),
so an append costs one round trip, as does any single statement now that the pool checks only
connections that sat idle.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
import psycopg_pool

from ..sql.engine import Dialect, Row, Statement, Tx
from .db import connection, migrate, translate_errors


class PostgresTx:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cursor = self._conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._conn.cursor().executemany(sql, rows)


class PostgresEngine:
    dialect: Dialect = "postgres"

    def __init__(self, pool: psycopg_pool.ConnectionPool) -> None:
        self._pool = pool
        self._local = threading.local()

    def _current(self) -> psycopg.Connection[Any] | None:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        conn = self._current()
        if conn is not None:
            with translate_errors(), conn.transaction():
                yield PostgresTx(conn)
            return
        with connection(self._pool) as conn, conn.transaction():
            self._local.conn = conn
            try:
                yield PostgresTx(conn)
            finally:
                self._local.conn = None

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        conn = self._current()
        if conn is not None:
            with translate_errors():
                yield PostgresTx(conn)
            return
        with connection(self._pool) as conn:
            yield PostgresTx(conn)

    def statement(self) -> AbstractContextManager[Tx]:
        return self.snapshot()

    def atomic(self, statements: Sequence[Statement]) -> list[Row]:
        conn = self._current()
        if conn is None:
            with connection(self._pool) as conn:
                return _pipelined(conn, statements)
        with translate_errors(), conn.transaction():
            return _pipelined(conn, statements)

    def migrate(self, component: str, steps: Sequence[str]) -> None:
        migrate(self._pool, component, steps)


def _pipelined(conn: psycopg.Connection[Any], statements: Sequence[Statement]) -> list[Row]:
    """Send every statement, then wait once. On an autocommit connection the extended protocol runs
    them in one implicit transaction up to the pipeline's sync, so they commit or fail together."""
    with conn.pipeline():
        cursors = [conn.execute(sql, params) for sql, params in statements]
    last = cursors[-1]
    return last.fetchall() if last.description else []
