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
    """Split a script into statements at the semicolons where ``is_complete`` says one ends,
    so a trigger's body (``BEGIN ...; END;``) or a ``;`` inside a string stays whole."""
    statements: list[str] = []
    current = ""
    for piece in script.split(";"):
        current += piece + ";"
        if is_complete(current):
            if current.strip(" \n\t;"):
                statements.append(current.strip())
            current = ""
    if current.strip(" \n\t;"):
        statements.append(current.strip().rstrip(";"))
    return statements
