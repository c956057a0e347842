"""Which store each framework suite runs against: the one place to point a suite at keepstate.

Every suite in tests/integrations is run once per *target*. The target ``framework`` is the
framework's own store, exactly as the framework's tests build it: it proves the harness (the
download, the selection, the deselect list, the shims) before any adapter is judged by it. Part 2
adds keepstate's adapters as more targets, each by one entry in the mappings below:

- ``CHECKPOINTERS``: a context manager yielding a fresh ``BaseCheckpointSaver`` (sync and async
  faces). Used by langgraph-checkpoint-conformance and, for every target but ``framework``, in
  place of the ``memory`` branch of langgraph's ``sync_checkpointer``/``async_checkpointer``.
- ``STORES``: the classes standing in for ``SqliteStore`` and ``AsyncSqliteStore`` (by name) in
  langgraph-checkpoint-sqlite's store tests: ``from_conn_string(conn_string, *, ttl=None)`` returns
  a context manager of a store with ``setup()``, ``sweep_ttl()``, ``start_ttl_sweeper()``...
- ``SESSIONS``: a class standing in for ``SQLiteSession`` in openai-agents' session tests, built
  from the same arguments: ``(session_id, db_path=":memory:", *, session_settings=None)``.
- ``ADK_SERVICES``: a context manager yielding a fresh ``BaseSessionService`` (our ADK suite).

``None`` means "leave the suite's own fixture as it is" (only ``framework`` uses it).
The subprocess suites learn their target from ``KEEPSTATE_UPSTREAM_TARGET``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

TARGET_VARIABLE = "KEEPSTATE_UPSTREAM_TARGET"

# The targets each subprocess suite runs against (a test id each); part 2 appends keepstate's.
SUITE_TARGETS: tuple[str, ...] = ("framework",)


@contextmanager
def _in_memory_saver() -> Iterator[Any]:
    from langgraph.checkpoint.memory import InMemorySaver

    yield InMemorySaver()


@contextmanager
def _in_memory_adk() -> Iterator[Any]:
    from google.adk.sessions import InMemorySessionService

    yield InMemorySessionService()


@contextmanager
def _database_adk_sqlite() -> Iterator[Any]:
    """ADK's DatabaseSessionService on a fresh SQLite file (aiosqlite)."""
    from google.adk.sessions import DatabaseSessionService

    with tempfile.TemporaryDirectory(prefix="adk-") as folder:
        yield DatabaseSessionService(f"sqlite+aiosqlite:///{Path(folder) / 'sessions.db'}")


CHECKPOINTERS: dict[str, Callable[[], AbstractContextManager[Any]] | None] = {
    "framework": None,  # langgraph's own suite keeps its MemorySaverAssertImmutable
}
# The conformance suite has no store of its own: it is proven on LangGraph's InMemorySaver.
CONFORMANCE_SAVERS: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "InMemorySaver": _in_memory_saver,
}
STORES: dict[str, dict[str, type[Any]] | None] = {"framework": None}
SESSIONS: dict[str, type[Any] | None] = {"framework": None}
ADK_SERVICES: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "InMemorySessionService": _in_memory_adk,
    "DatabaseSessionService-sqlite": _database_adk_sqlite,
}


def current() -> str:
    """The target of this (subprocess) suite run."""
    return os.environ.get(TARGET_VARIABLE, "framework")


@asynccontextmanager
async def async_entered(factory: Callable[[], AbstractContextManager[Any]]) -> AsyncIterator[Any]:
    """A sync factory's value inside an async fixture (the conformance suite wants async)."""
    with factory() as value:
        yield value
