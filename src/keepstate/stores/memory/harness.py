"""The harness facet's engine in memory: an in-process SQLite database on one connection.

The very same SQL as the file backend (``sql/harness_facet.py`` over ``sqlite.harness.SqliteFamily``),
so the memory store cannot drift from it; one re-entrant lock keeps its one connection to one
thread at a time.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..sqlite.db import connect, migrate
from ..sqlite.harness import SqliteFamily


class MemorySqlite:
    """One in-process SQLite database and the lock that serialises its users."""

    def __init__(self) -> None:
        self.conn = connect(":memory:")
        self.lock = threading.RLock()

    def close(self) -> None:
        self.conn.close()


class MemoryEngine(SqliteFamily):
    """The harness tables of a memory store, in its in-process database."""

    def __init__(self, database: MemorySqlite) -> None:
        super().__init__()
        self._database = database

    def _connection(self) -> sqlite3.Connection:
        return self._database.conn

    def _guard(self) -> AbstractContextManager[Any]:
        return self._database.lock

    def migrate(self, component: str, steps: Sequence[str]) -> None:
        with self._guard():
            migrate(self._connection(), component, steps)
