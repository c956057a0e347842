"""The harness facet's engine on SQLite: the file's per-thread connections, nested transactions.

``SqliteEngine`` runs ``sql/harness_facet.py``'s statements on the shared ``SqliteFile`` (WAL, FULL
sync, busy timeout), so several processes may share the file; ``BEGIN IMMEDIATE`` serialises writers.
``SqliteFamily`` (nesting as savepoints, error translation) serves the memory backend's in-process
database too, which runs the very same SQL, so the two cannot drift apart. Driver errors meaning
"the database can't be used now" become ``keepstate.Unavailable`` here.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from ..sql.engine import Dialect, Row, Statement, Tx
from .db import SqliteFile, translate_errors, write_transaction


class SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._conn.execute(sql, params).fetchall()

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._conn.executemany(sql, rows)


class SqliteFamily:
    """Nesting and error translation shared by the file and the memory engine."""

    dialect: Dialect = "sqlite"

    def __init__(self) -> None:
        self._depth = threading.local()

    def _connection(self) -> sqlite3.Connection:
        raise NotImplementedError

    def _guard(self) -> AbstractContextManager[Any]:
        return nullcontext()

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._guard():
            conn = self._connection()
            depth: int = getattr(self._depth, "value", 0)
            self._depth.value = depth + 1
            try:
                scope = write_transaction(conn) if depth == 0 else _savepoint(conn, depth)
                with scope, translate_errors():
                    yield SqliteTx(conn)
            finally:
                self._depth.value = depth

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        with self._guard(), translate_errors():
            yield SqliteTx(self._connection())

    def statement(self) -> AbstractContextManager[Tx]:
        return self.transaction()

    def atomic(self, statements: Sequence[Statement]) -> list[Row]:
        with self.transaction() as tx:
            results = [tx.rows(sql, params) for sql, params in statements]
        return results[-1]


@contextmanager
def _savepoint(conn: sqlite3.Connection, depth: int) -> Iterator[None]:
    name = f"harness_{depth}"
    with translate_errors():
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
            raise
        conn.execute(f"RELEASE {name}")


class SqliteEngine(SqliteFamily):
    """A SQLite file, possibly shared with other processes."""

    def __init__(self, file: SqliteFile) -> None:
        super().__init__()
        self._file = file

    def _connection(self) -> sqlite3.Connection:
        return self._file.connection()

    def migrate(self, component: str, steps: Sequence[str]) -> None:
        self._file.migrate(component, steps)
