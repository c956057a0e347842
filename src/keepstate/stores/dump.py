"""The platform's rows as export/import moves them: every table, every column, bytes kept.

The SQL backends (SQLite, PostgreSQL) share one table layout (``sql/platform.py``), so a dump is a
list of ``(table, row)`` with rows as column → value dicts; bytes columns (canonical JSON of
inputs, outputs, metadata) travel as ``{"$b64": ...}`` so any JSON line format carries them.
Keys travel as their secret hashes only: an export never holds a usable secret.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from typing import Any

TABLES = (
    "ks_envs",
    "ks_keys",
    "ks_sessions",
    "ks_event_heads",
    "ks_runs",
    "ks_invocations",
    "ks_session_agents",
    "ks_end_users",
    "ks_run_events",
)
"""In an order that an import can follow: what a row refers to comes first. A run's event head comes
before the run: a run arriving with no head gets the events of its status (``sql/events.py``), one
whose head came first brings its events, later."""
KEYS = {
    "ks_envs": ("name",),
    "ks_keys": ("id",),
    "ks_sessions": ("seq",),
    "ks_runs": ("seq",),
    "ks_invocations": ("seq",),
    "ks_session_agents": ("env", "session_id", "agent"),
    "ks_end_users": ("env", "end_user"),
    "ks_event_heads": ("run_id",),
    "ks_run_events": ("run_id", "seq"),
}
"""Each table's primary key: the order of its rows in a dump, the same on every backend (an import keeps
``seq``), so export → import → export gives the same lines back in the same order."""


def order_by(table: str, text_collation: str = "") -> str:
    """``ORDER BY`` of a table's rows in a dump: its key's columns, text ones in byte order (``text_collation``
    makes it so where the default is not, ``COLLATE "C"`` on PostgreSQL)."""
    return ", ".join(f"{column}{'' if column == 'seq' else text_collation}" for column in KEYS[table])


LOCAL = {"ks_run_events": ("id",)}
"""Columns a backend keeps for itself, never in a dump: SQLite's change cursor of the events."""


def exported(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """A row as a dump carries it: without the table's ``LOCAL`` columns."""
    for name in LOCAL.get(table, ()):
        row.pop(name, None)
    return row


def runs_of(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The run ids of ``ks_run_events`` rows, each once, in order."""
    return list(dict.fromkeys(row["run_id"] for row in rows))


def encode_row(columns: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    return {name: _encode(value) for name, value in zip(columns, row, strict=True)}


def decode_row(row: dict[str, Any]) -> dict[str, Any]:
    return {name: _decode(value) for name, value in row.items()}


def check_table(table: str, columns: Iterator[str] | Sequence[str]) -> None:
    """Refuse a dump line naming a table or column this version does not know (never SQL from input)."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r} in the dump")
    for name in columns:
        if not name.replace("_", "").isalnum() or name in LOCAL.get(table, ()):
            raise ValueError(f"bad column name {name!r} in the dump")


def _encode(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$b64": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"$b64"}:
        return base64.b64decode(value["$b64"])
    return value
