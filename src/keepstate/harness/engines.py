"""Where the harness store's SQL runs: one small engine per URL scheme, all with one shape.

An engine hands out a ``Tx`` (run a statement, get rows or a row count) inside ``transaction()``
or ``snapshot()``, and that is all the store sees of a database. ``transaction()`` nests: the
outermost opens a real write transaction (SQLite ``BEGIN IMMEDIATE``, PostgreSQL ``BEGIN``), an
inner one is a savepoint, so each store method is atomic on its own and also joins a transaction
the caller opened around several methods. Transactions are per thread.

- ``sqlite:///file.db``: the shared ``SqliteDatabase`` (per-thread connections, WAL, FULL sync,
  busy timeout), so several processes may share the file; ``BEGIN IMMEDIATE`` serialises writers.
- ``memory://`` / ``memory://name``: an in-process SQLite database on one connection behind a
  re-entrant lock. The same SQL as the file backend, so the memory store cannot drift from it;
  stores opened with one name share it while any of them is open.
- ``postgresql://``: the ``postgres`` module of this package, imported only when used.

Driver errors meaning "the database can't be used now" become ``keepstate.Unavailable`` here.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from ..stores.sqlite_db import SqliteDatabase, connect, migrate, sqlite_path, translate_errors, write_transaction
from .schema import Dialect

Row = tuple[Any, ...]
Statement = tuple[str, Sequence[Any]]
"""SQL text and its parameters."""


class Tx(Protocol):
    """A statement runner inside a transaction or snapshot."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run ``sql`` and return the rows it produced (none for a plain write)."""

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a write and return how many rows it changed."""

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one write once per parameter row (one prepared statement, one driver call)."""


class Engine(Protocol):
    dialect: Dialect

    def transaction(self) -> AbstractContextManager[Tx]:
        """A write transaction, or a savepoint inside this thread's open one."""

    def snapshot(self) -> AbstractContextManager[Tx]:
        """Single-statement reads; inside this thread's open transaction, they see its writes."""

    def statement(self) -> AbstractContextManager[Tx]:
        """Writes that each guard themselves in one statement, so need no transaction around them.

        Inside this thread's open transaction they join it. Outside, PostgreSQL runs them in
        autocommit (saving the BEGIN and COMMIT round trips); SQLite still takes ``BEGIN IMMEDIATE``.
        """

    def atomic(self, statements: Sequence[Statement]) -> list[Row]:
        """Run ``statements`` in order as one atomic unit and return the rows of the last.

        Outside a transaction PostgreSQL sends them all in one round trip (pipeline mode: one
        implicit transaction, committed at its end); inside one, they run in a savepoint.
        """

    def migrate(self, component: str, steps: Sequence[str]) -> None: ...

    def close(self) -> None: ...


def open_engine(url: str) -> Engine:
    """The engine for ``url``; ValueError for a scheme the harness store does not run on."""
    scheme = url.partition("://")[0]
    if scheme == "memory":
        return MemoryEngine(url[len("memory://"):])
    if scheme == "sqlite":
        return SqliteEngine(sqlite_path(url))
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresEngine

        return PostgresEngine(url)
    raise ValueError(f"the harness store runs on memory://, sqlite:/// or postgresql://, not {url!r:.80}")


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


class _SqliteFamily:
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


class SqliteEngine(_SqliteFamily):
    """A SQLite file, possibly shared with other processes."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._db = SqliteDatabase(path)

    def _connection(self) -> sqlite3.Connection:
        return self._db.connection()

    def migrate(self, component: str, steps: Sequence[str]) -> None:
        self._db.migrate(component, steps)

    def close(self) -> None:
        self._db.close()


class _MemoryDatabase:
    def __init__(self) -> None:
        self.conn = connect(":memory:")
        self.lock = threading.RLock()


_MEMORY: dict[str, _MemoryDatabase] = {}
_MEMORY_LOCK = threading.Lock()


class MemoryEngine(_SqliteFamily):
    """An in-process database; ``name`` shares it between stores (empty: a private one)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        with _MEMORY_LOCK:
            database = _MEMORY.get(name) if name else None
            if database is None:
                database = _MemoryDatabase()
                if name:
                    _MEMORY[name] = database
        self._database: _MemoryDatabase | None = database

    def _open(self) -> _MemoryDatabase:
        if self._database is None:
            raise ValueError("this harness store is closed")
        return self._database

    def _connection(self) -> sqlite3.Connection:
        return self._open().conn

    def _guard(self) -> AbstractContextManager[Any]:
        return self._open().lock

    def migrate(self, component: str, steps: Sequence[str]) -> None:
        with self._guard():
            migrate(self._connection(), component, steps)

    def close(self) -> None:
        self._database = None
