"""Which store each framework suite runs against: the one place to point a suite at keepstate.

The subprocess suites (test_upstream_suites.py) run once per *target* of ``SUITE_TARGETS``. The
target ``framework`` is the framework's own store, exactly as the framework's tests build it: it
proves the harness (the download, the selection, the deselect list, the shims) before any adapter
is judged by it. keepstate's adapters are added as more targets, each by one entry in the
mappings below and its name in ``SUITE_TARGETS``; the in-process suites take one more entry each.

- ``CHECKPOINTERS``: a context manager yielding a fresh ``BaseCheckpointSaver`` (sync and async
  faces), in place of the ``memory`` branch of langgraph's ``sync_checkpointer`` and
  ``async_checkpointer`` (the branch is used as a sync context manager in both).
- ``STORES``: the classes standing in for ``SqliteStore`` and ``AsyncSqliteStore`` (by name) in
  langgraph-checkpoint-sqlite's store tests: ``from_conn_string(conn_string, *, ttl=None)`` returns
  a context manager of a store with ``setup()``, ``sweep_ttl()``, ``start_ttl_sweeper()``...
- ``SESSIONS``: a class standing in for ``SQLiteSession`` in openai-agents' session tests, built
  from the same arguments: ``(session_id, db_path=":memory:", *, session_settings=None)``.
- ``CONFORMANCE_SAVERS``: savers for langgraph-checkpoint-conformance, run in process, with the
  extended capabilities each must pass (keepstate's: copy_thread, delete_for_runs, prune).
- ``ADK_SERVICES``: a fresh ``BaseSessionService`` for our ADK suite (test_adk_sessions.py).

``None`` means "leave the suite's own fixture as it is" (only ``framework`` uses it).
The subprocess suites learn their target from ``KEEPSTATE_UPSTREAM_TARGET``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from openai_stand_in import StandInSQLiteSession

TARGET_VARIABLE = "KEEPSTATE_UPSTREAM_TARGET"

# The targets each subprocess suite runs against (a test id each): the framework's own store, and
# keepstate's adapter on a SQLite file (``keepstate-sqlite``).
SUITE_TARGETS: tuple[str, ...] = ("framework", "keepstate-sqlite")


@dataclass(frozen=True)
class InProcess:
    """A store for an in-process suite: ``open(request)`` enters a fresh one (fixtures such as
    ``pg_url`` come from ``request``). ``extended``: the optional conformance capabilities a saver
    must pass; ``refuses_stale``: an ADK service refuses appends through a stale session object
    (StaleSessionError) instead of applying them on top of storage (keepstate's applies them unless
    they write a key another writer changed since)."""

    open: Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[Any]]
    extended: frozenset[str] = frozenset()
    refuses_stale: bool = False


@asynccontextmanager
async def _in_memory_saver(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    from langgraph.checkpoint.memory import InMemorySaver

    yield InMemorySaver()


@asynccontextmanager
async def _postgres_saver(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """LangGraph's AsyncPostgresSaver in a fresh schema: the one framework saver with ``prune``."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(request.getfixturevalue("pg_url")) as saver:
        await saver.setup()
        yield saver


@contextmanager
def _keepstate_checkpointer_sqlite() -> Iterator[Any]:
    """keepstate's KeepstateSaver on a fresh SQLite file."""
    from keepstate.integrations.langgraph import KeepstateSaver

    with (
        tempfile.TemporaryDirectory(prefix="keepstate-saver-") as folder,
        KeepstateSaver(f"sqlite:///{folder}/checkpoints.db") as saver,
    ):
        yield saver


def _keepstate_saver(fixture: str) -> Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[Any]]:
    """keepstate's KeepstateSaver on the store URL a fixture gives (a fresh store per saver)."""

    @asynccontextmanager
    async def saver(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
        from keepstate.integrations.langgraph import KeepstateSaver

        if fixture == "tmp_path":
            url = f"sqlite:///{request.getfixturevalue('tmp_path')}/saver-{os.urandom(4).hex()}.db"
        else:
            url = str(request.getfixturevalue(fixture))
        async with KeepstateSaver(url) as opened:
            yield opened

    return saver


@asynccontextmanager
async def _in_memory_adk(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    from google.adk.sessions import InMemorySessionService

    yield InMemorySessionService()


@asynccontextmanager
async def _database_adk_sqlite(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """ADK's DatabaseSessionService on a fresh SQLite file (aiosqlite)."""
    from google.adk.sessions import DatabaseSessionService

    path = request.getfixturevalue("tmp_path") / "adk-sessions.db"
    service = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
    try:
        yield service
    finally:
        await service.close()


@asynccontextmanager
async def _sqlite_adk(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """ADK's SqliteSessionService (sqlite3, no SQLAlchemy) on a fresh file."""
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    yield SqliteSessionService(str(request.getfixturevalue("tmp_path") / "adk-sqlite.db"))


@asynccontextmanager
async def _keepstate_adk(request: pytest.FixtureRequest, url: str) -> AsyncIterator[Any]:
    from keepstate.integrations.adk import KeepstateSessionService

    service = KeepstateSessionService(url)
    try:
        yield service
    finally:
        await service.close()


def _keepstate_adk_on(
    url_of: Callable[[pytest.FixtureRequest], str],
) -> Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[Any]]:
    """keepstate's ADK service on the store ``url_of(request)`` names."""
    return lambda request: _keepstate_adk(request, url_of(request))


def _keepstate_store_url(conn_string: str) -> str:
    """The keepstate URL of a LangGraph store test's connection string: the same file, or memory."""
    return "memory://" if conn_string == ":memory:" else f"sqlite:///{conn_string}"


class KeepstateSqliteStore:
    """``SqliteStore``'s stand-in: ``from_conn_string(path, ttl=..., index=...)`` gives a KeepstateStore on it."""

    @staticmethod
    @contextmanager
    def from_conn_string(conn_string: str, *, ttl: Any = None, index: Any = None) -> Iterator[Any]:
        from keepstate.integrations.langgraph.store import KeepstateStore

        with KeepstateStore(_keepstate_store_url(conn_string), ttl=ttl, index=index) as store:
            yield store


class KeepstateAsyncSqliteStore:
    """``AsyncSqliteStore``'s stand-in: an AsyncKeepstateStore on the same file."""

    @staticmethod
    @asynccontextmanager
    async def from_conn_string(conn_string: str, *, ttl: Any = None, index: Any = None) -> AsyncIterator[Any]:
        from keepstate.integrations.langgraph.store import AsyncKeepstateStore

        async with AsyncKeepstateStore(_keepstate_store_url(conn_string), ttl=ttl, index=index) as store:
            yield store


# For the subprocess suites, per target: None leaves the suite's own store in place.
CHECKPOINTERS: dict[str, Callable[[], AbstractContextManager[Any]] | None] = {
    "framework": None,  # langgraph's own suite keeps its MemorySaverAssertImmutable
    "keepstate-sqlite": _keepstate_checkpointer_sqlite,
}
STORES: dict[str, dict[str, type[Any]] | None] = {
    "framework": None,
    "keepstate-sqlite": {"SqliteStore": KeepstateSqliteStore, "AsyncSqliteStore": KeepstateAsyncSqliteStore},
}
SESSIONS: dict[str, type[Any] | None] = {
    "framework": None,
    "keepstate-sqlite": StandInSQLiteSession,  # KeepstateSession on the same SQLite file
}

# For the in-process suites, by test id. The conformance suite has no store of its own; it is
# proven on LangGraph's own savers.
CONFORMANCE_SAVERS: dict[str, InProcess] = {
    "InMemorySaver": InProcess(_in_memory_saver),
    "AsyncPostgresSaver": InProcess(_postgres_saver, frozenset({"prune"})),
    "keepstate-sqlite": InProcess(_keepstate_saver("tmp_path"), frozenset({"copy_thread", "delete_for_runs", "prune"})),
    "keepstate-postgres": InProcess(_keepstate_saver("pg_url"), frozenset({"copy_thread", "delete_for_runs", "prune"})),
    "keepstate-redis": InProcess(_keepstate_saver("redis_url"), frozenset({"copy_thread", "delete_for_runs", "prune"})),
    "keepstate-redis-cluster": InProcess(
        _keepstate_saver("redis_cluster_url"), frozenset({"copy_thread", "delete_for_runs", "prune"})
    ),
}
ADK_SERVICES: dict[str, InProcess] = {
    "InMemorySessionService": InProcess(_in_memory_adk),
    "DatabaseSessionService-sqlite": InProcess(_database_adk_sqlite, refuses_stale=True),
    "SqliteSessionService": InProcess(_sqlite_adk, refuses_stale=True),
    "keepstate-sqlite": InProcess(
        _keepstate_adk_on(lambda request: f"sqlite:///{request.getfixturevalue('tmp_path') / 'keepstate.db'}")
    ),
    "keepstate-postgres": InProcess(_keepstate_adk_on(lambda request: request.getfixturevalue("pg_url"))),
    "keepstate-redis": InProcess(_keepstate_adk_on(lambda request: request.getfixturevalue("redis_url"))),
    "keepstate-memory": InProcess(_keepstate_adk_on(lambda request: "memory://")),
}


def suite_stores(suite: str) -> dict[str, Any]:
    """The mapping that swaps the store of subprocess suite ``suite`` (upstream_run.SUITES' names)."""
    return {"langgraph": CHECKPOINTERS, "langgraph-checkpoint-sqlite": STORES, "openai-agents": SESSIONS}[suite]


def current() -> str:
    """The target of this (subprocess) suite run."""
    return os.environ.get(TARGET_VARIABLE, "framework")
