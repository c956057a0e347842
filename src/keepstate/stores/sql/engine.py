"""The small shape a SQL facet runs on: a ``Tx`` that executes statements, and an ``Engine`` of them.

An engine hands out a ``Tx`` inside ``transaction()`` or ``snapshot()``, and that is all the harness
facet (``sql/harness_facet.py``) sees of a database. ``transaction()`` nests: the outermost opens a
real write transaction (SQLite ``BEGIN IMMEDIATE``, PostgreSQL ``BEGIN``), an inner one is a
savepoint, so each facet method is atomic on its own and also joins a transaction the caller opened
around several methods. Transactions are per thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol

Dialect = Literal["sqlite", "postgres"]
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
