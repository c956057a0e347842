"""The harness store's PostgreSQL engine: a sync connection pool, one connection per transaction.

Built on ``keepstate.stores.postgres_db`` (pool, error translation, migrations under an advisory
lock). Outside a transaction each statement borrows a pooled autocommit connection; inside one,
the thread keeps its connection until the outermost transaction ends, and inner transactions are
psycopg savepoints. READ COMMITTED is enough: every guard is inside the writing statement
(``UPDATE … WHERE status = …``, ``INSERT … ON CONFLICT``), and writers of one log queue on its
head row's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg

from ..stores.postgres_db import connection, migrate, open_pool, translate_errors
from .engines import Row, Tx
from .schema import Dialect


class PostgresTx:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cursor = self._conn.execute(sql, params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, params).rowcount  # type: ignore[arg-type]


class PostgresEngine:
    dialect: Dialect = "postgres"

    def __init__(self, url: str) -> None:
        self._pool = open_pool(url)
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

    def migrate(self, component: str, steps: Sequence[str]) -> None:
        migrate(self._pool, component, steps)

    def close(self) -> None:
        self._pool.close()
