"""``sqlite:///file.db``: every facet on one SQLite file, shared by the processes of one machine.

The facets (``state``, ``platform``, ``leases``, ``harness``, ``documents``) run on the process's one ``SqliteFile``
of the path (``db.py``): per-thread connections for reads and sync writes, one writer thread that
group-commits every async write of every facet. Two facets that must act together do so in one
transaction of that writer (``delete_session``) or one statement (``read_with_lease``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from ..base import Capabilities, Database, HarnessFacet, LeaseAndEntry, LeaseFacet, PlatformFacet
from ..records import BackupReport, StoredSession, namespace
from ..remembered import Memo, Remembered
from ..session_forks import Cuts, copies, cuts_of
from ..sql import platform as platform_sql
from ..sql.harness_facet import SqlHarness
from . import db
from . import documents as documents_facet
from . import platform as platform_facet
from . import state as state_facet
from .backup import backup as copy_file
from .harness import SqliteEngine
from .leases import SqliteLeases

T = TypeVar("T")
CAPABILITIES = Capabilities(shared=True, platform=True, leases=True, harness=True, documents=True, file_backup=True)


class SqliteDatabase(Database):
    capabilities = CAPABILITIES

    @classmethod
    def preflight(cls, url: str, must_exist: bool) -> None:
        """A SQLite store is the file its URL names: refuse a path that can never be one (a directory, a
        missing directory) and, with ``must_exist``, a file that is not a keepstate store yet."""
        db.check_path(db.sqlite_path(url), must_exist)

    @classmethod
    def backup(cls, url: str, target: str, replace: bool) -> BackupReport:
        """SQLite's online backup of the file, checked before it is put in place (``backup.py``)."""
        return copy_file(db.sqlite_path(url), target, replace)

    def __init__(self, url: str) -> None:
        self.url = url
        self.file = db.acquire(db.sqlite_path(url))
        self._state: state_facet.AsyncSqliteState | None = None
        self._sync_state: state_facet.SqliteState | None = None
        self._platform: platform_facet.SqlitePlatform | None = None
        self._documents: documents_facet.AsyncSqliteDocuments | None = None
        self._sync_documents: documents_facet.SqliteDocuments | None = None
        self._closed = False

    async def state(self) -> state_facet.AsyncSqliteState:
        if self._state is None:
            self._state = state_facet.AsyncSqliteState(self.file)
        return self._state

    def sync_state(self) -> state_facet.SqliteState:
        if self._sync_state is None:
            self._sync_state = state_facet.SqliteState(self.file)
        return self._sync_state

    async def platform(self) -> PlatformFacet:
        return self._platform_facet()

    remembers_sync = True

    def remember_sync(self, memo: Memo, work: Callable[[], T]) -> T | Remembered:
        return self._platform_facet().remember_sync(memo, work)

    async def documents(self) -> documents_facet.AsyncSqliteDocuments:
        if self._documents is None:
            self._documents = documents_facet.AsyncSqliteDocuments(self.file)
        return self._documents

    def sync_documents(self) -> documents_facet.SqliteDocuments:
        if self._sync_documents is None:
            self._sync_documents = documents_facet.SqliteDocuments(self.file)
        return self._sync_documents

    def _platform_facet(self) -> platform_facet.SqlitePlatform:
        if self._platform is None:
            self._platform = platform_facet.SqlitePlatform(self.file)
        return self._platform

    async def leases(self, space: str) -> LeaseFacet:
        return SqliteLeases(self.file, space)

    def harness(self, prefix: str, chunk_size: int) -> HarnessFacet:
        return SqlHarness(SqliteEngine(self.file), prefix, chunk_size)

    async def read_with_lease(self, token_hash: str, ns: str, key: str) -> LeaseAndEntry:
        """One statement, so one snapshot: the lease's scalar subquery joined to the value's header."""
        if self._state is None or self._platform is None:
            await self.state()
            self._platform_facet()
        lease_until, entry = state_facet.read_with(self.file, platform_sql.TOKEN_LEASE, (token_hash,), ns, key)
        return (None if lease_until is None else int(lease_until)), entry

    async def delete_session(self, env: str, session_id: str, now: int) -> list[str] | None:
        await self.state()  # both facets' tables exist
        self._platform_facet()

        def write(conn: sqlite3.Connection) -> list[str] | None:
            agents = platform_facet.delete_session(conn, env, session_id, now)
            for agent in agents or ():
                state_facet.drop(conn, namespace(env, "session", agent, session_id))
            return agents

        return await self.file.awrite(write)

    async def fork_session(
        self, source: StoredSession, fork: StoredSession, cuts: Cuts
    ) -> tuple[StoredSession, bool] | None:
        """One transaction of the file's one writer: no write lands midway, and a refusal undoes it all."""
        await self.state()  # both facets' tables exist
        self._platform_facet()

        def write(conn: sqlite3.Connection) -> tuple[StoredSession, bool] | None:
            forked = platform_facet.fork_session(conn, source, fork)
            if forked is None or not forked.created:
                return None if forked is None else (forked.session, False)
            for copied, target in copies(source, forked):
                state_facet.copy(conn, copied, target)
            for ns, key, keep in cuts_of(forked.session, cuts):
                state_facet.keep_first(conn, ns, key, keep)
            return forked.session, True

        return await self.file.awrite(write)

    async def ping(self) -> None:
        await self.file.aread(lambda conn: conn.execute("SELECT 1").fetchone())

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            db.release(self.file)
