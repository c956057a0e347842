"""Append-only, versioned schema steps, shared by every SQL backend.

Each component (the state store, the platform, the session store, a harness prefix) owns a list
of SQL scripts. Step *n* (1-based) is applied once, recorded in ``keepstate_schema`` in the same
transaction, under a lock that serialises concurrent openers (SQLite: ``BEGIN IMMEDIATE``;
PostgreSQL: a transaction-scoped advisory lock). Never edit a released step: add one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence


def pending_steps(steps: Sequence[str], done: int) -> Iterator[tuple[int, str]]:
    """The steps after version ``done``, numbered from 1."""
    if done > len(steps):
        raise RuntimeError(
            f"the store's schema is at version {done}, newer than this keepstate knows ({len(steps)}): "
            "upgrade keepstate"
        )
    for index in range(done, len(steps)):
        yield index + 1, steps[index]


def split_sql(script: str, is_complete: Callable[[str], bool]) -> list[str]:
    """Split a script into statements, keeping trigger bodies whole (``is_complete`` decides)."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if current.strip() and is_complete(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements
