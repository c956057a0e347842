"""``postgresql://``: every facet on one PostgreSQL database, for many processes on many machines.

psycopg's asyncio pools belong to the event loop that made them, so the process keeps one pool per
(URL, loop), shared by every ``PostgresDatabase`` of the URL in that loop — a server has one loop
and so one pool for its state, platform and leases. The synchronous faces (the embedded store, the
harness store) use a private loop thread (``faces.EventLoopThread``) for the state facet and one
sync pool for the harness. Schemas migrate once per process per component, under the database's
advisory lock. Two facets that must act together do so in one statement (``read_with_lease``) or
one transaction on one connection (``delete_session``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import forks
from ..base import Capabilities, Database, HarnessFacet, LeaseAndEntry, LeaseFacet, PlatformFacet
from ..ending import close_on_loop
from ..faces import DocumentsPortal, Portal, SyncState
from ..records import StoredSession, namespace
from ..session_forks import Cuts, copies, cuts_of
from ..sql import platform as shared_sql
from ..sql.harness_facet import SqlHarness
from . import db
from . import documents as documents_facet
from . import leases as leases_facet
from . import platform as platform_facet
from . import platform_sql as pg_platform_sql
from . import state as state_facet
from .harness import PostgresEngine

try:
    import psycopg
    import psycopg_pool
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

OWN_BACKUP = "use pg_dump (or a base backup with WAL archiving for point-in-time recovery)"
"""How this store is backed up: it has no file backup (``keepstate backup``)."""
CAPABILITIES = Capabilities(
    shared=True, platform=True, leases=True, harness=True, documents=True, own_backup=OWN_BACKUP
)
TOKEN_LEASE = pg_platform_sql.pg(shared_sql.TOKEN_LEASE)
SCHEMAS: dict[str, Sequence[str]] = {
    state_facet.COMPONENT: state_facet.STEPS,
    platform_facet.COMPONENT: pg_platform_sql.STEPS,
    leases_facet.COMPONENT: leases_facet.STEPS,
    documents_facet.COMPONENT: documents_facet.STEPS,
}


@dataclass
class _Pooled:
    """An async pool of one (URL, loop) and how many Databases use it."""

    pool: psycopg_pool.AsyncConnectionPool
    users: int = 0
    migrated: set[str] = field(default_factory=set)
    """The components whose schema this process brought up to date."""


_POOLS: dict[tuple[str, asyncio.AbstractEventLoop], _Pooled] = {}
_OPENING: dict[tuple[str, asyncio.AbstractEventLoop], asyncio.Future[None]] = {}
"""The pools being opened: a concurrent first call waits for the one opener instead of opening its
own (a ``gather`` of 2,000 first calls would otherwise open 2,000 pools: "too many clients")."""
_POOLS_LOCK = threading.Lock()


def _forget_pools_in_child() -> None:
    """A forked child forgets the parent's pools (never closing them: the sockets are the parent's)."""
    global _POOLS_LOCK
    _POOLS.clear()
    _OPENING.clear()
    _POOLS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_in_child)


async def _acquire(url: str) -> _Pooled:
    """The pool of (``url``, running loop), opened by the first caller; one more user of it."""
    loop = asyncio.get_running_loop()
    key = (url, loop)
    while True:
        with _POOLS_LOCK:
            for stale in [stale for stale in _POOLS if stale[1].is_closed()]:  # a loop that ended unclosed
                del _POOLS[stale]
            found = _POOLS.get(key)
            if found is not None:
                found.users += 1
                return found
            opening = _OPENING.get(key)
            if opening is None:
                opening = _OPENING[key] = loop.create_future()
                break
        await asyncio.shield(opening)  # the opener's error is ours too; once open, look again
    try:
        pool = await db.open_async_pool(url)
    except Exception as error:
        _opened(key, opening, error)
        raise
    except BaseException:  # cancelled: a waiter opens it instead
        _opened(key, opening, None)
        raise
    with _POOLS_LOCK:
        found = _POOLS[key] = _Pooled(pool, users=1)
    _opened(key, opening, None)
    return found


def _opened(key: tuple[str, asyncio.AbstractEventLoop], opening: asyncio.Future[None], error: Exception | None) -> None:
    with _POOLS_LOCK:
        _OPENING.pop(key, None)
    if error is None:
        opening.set_result(None)
    else:
        opening.set_exception(error)
        opening.add_done_callback(lambda done: done.exception())  # retrieved, when nobody waited


async def _release(url: str, pooled: _Pooled) -> None:
    with _POOLS_LOCK:
        pooled.users -= 1
        if pooled.users > 0:
            return
        for key, value in list(_POOLS.items()):
            if value is pooled:
                del _POOLS[key]
    await pooled.pool.close()


class PostgresDatabase(Database):
    capabilities = CAPABILITIES
    loop_bound = True

    @classmethod
    def preflight(cls, url: str, must_exist: bool) -> None:
        """With ``must_exist``, refuse a database (or schema) holding no keepstate store, creating nothing."""
        if must_exist:
            db.require_store(db.pg_url(url))

    def __init__(self, url: str) -> None:
        self.url = db.pg_url(url)
        self._pooled: _Pooled | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._sync = SyncState(lambda: PostgresDatabase(url))
        self._sync_pool: psycopg_pool.ConnectionPool | None = None
        self._state: state_facet.PostgresState | None = None
        self._lock = threading.Lock()
        forks.forget_in_child(self, PostgresDatabase._forget)

    async def pool(self) -> psycopg_pool.AsyncConnectionPool:
        """This Database's async pool, in the running loop (the first call decides the loop).

        A Database dropped without ``aclose()`` gives its share of the pool back at GC or exit, on
        the pool's loop (``ending.close_on_loop``): else the pool's tasks die pending at exit."""
        if self._pooled is None:
            pooled = await _acquire(self.url)
            if self._pooled is None:
                self._pooled = pooled
                self._finalizer = close_on_loop(
                    self, asyncio.get_running_loop(), functools.partial(_release, self.url, pooled)
                )
            else:  # a concurrent first call of this Database won
                await _release(self.url, pooled)
        return self._pooled.pool

    async def _migrated(self, component: str) -> psycopg_pool.AsyncConnectionPool:
        pool = await self.pool()
        assert self._pooled is not None
        if component not in self._pooled.migrated:
            await db.amigrate(pool, component, SCHEMAS[component])
            self._pooled.migrated.add(component)
        return pool

    async def state(self) -> state_facet.PostgresState:
        if self._state is None:
            self._state = state_facet.PostgresState(await self._migrated(state_facet.COMPONENT))
        return self._state

    def sync_state(self) -> Portal:
        return self._sync.face()

    async def platform(self) -> PlatformFacet:
        return platform_facet.PostgresPlatform(await self._migrated(platform_facet.COMPONENT))

    async def documents(self) -> documents_facet.PostgresDocuments:
        return documents_facet.PostgresDocuments(await self._migrated(documents_facet.COMPONENT))

    def sync_documents(self) -> DocumentsPortal:
        return self._sync.documents()

    async def leases(self, space: str) -> LeaseFacet:
        return leases_facet.PostgresLeases(await self._migrated(leases_facet.COMPONENT), space)

    def harness(self, prefix: str, chunk_size: int) -> HarnessFacet:
        with self._lock:
            if self._sync_pool is None:
                self._sync_pool = db.open_pool(self.url)
        return SqlHarness(PostgresEngine(self._sync_pool), prefix, chunk_size)

    async def read_with_lease(self, token_hash: str, ns: str, key: str) -> LeaseAndEntry:
        """One statement, one round trip: the lease's scalar subquery joined to the value's header."""
        facet = self._state or await self.state()
        lease_until, entry = await facet.get_with(TOKEN_LEASE, (token_hash,), ns, key)
        return (None if lease_until is None else int(lease_until)), entry

    async def delete_session(self, env: str, session_id: str, now: int) -> list[str] | None:
        await self.state()
        pool = await self._migrated(platform_facet.COMPONENT)
        async with db.aconnection(pool) as conn, conn.transaction():
            agents = await platform_facet.delete_session(conn, env, session_id, now)
            for agent in agents or ():
                await state_facet.drop(conn, namespace(env, "session", agent, session_id))
        return agents

    async def fork_session(
        self, source: StoredSession, fork: StoredSession, cuts: Cuts
    ) -> tuple[StoredSession, bool] | None:
        """One REPEATABLE READ transaction: every read of the source sees one snapshot, whatever commits
        meanwhile (the source is only read, so nothing waits for its writers, nor they for the fork);
        a refusal rolls it all back. A fork of an id being made at the same moment is tried again."""
        await self.state()
        pool = await self._migrated(platform_facet.COMPONENT)
        async with db.aconnection(pool) as conn:
            while True:
                try:
                    return await _fork(conn, source, fork, cuts)
                except psycopg.errors.SerializationFailure:
                    continue

    async def ping(self) -> None:
        async with db.aconnection(await self.pool()) as conn:
            await conn.execute("SELECT 1")

    async def aclose(self) -> None:
        pooled, self._pooled, self._state = self._pooled, None, None
        if self._finalizer is not None:
            self._finalizer.detach()
        if pooled is not None:
            await _release(self.url, pooled)
        self.close()

    def _forget(self) -> None:
        """In a forked child: the pools are the parent's; this Database opens its own on next use."""
        if self._finalizer is not None:
            self._finalizer.detach()
        self._pooled = self._finalizer = self._state = self._sync_pool = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """The sync faces' resources (the loop thread, the harness pool); an async pool goes with ``aclose``,
        in its own loop."""
        self._sync.close()
        with self._lock:
            sync_pool, self._sync_pool = self._sync_pool, None
        if sync_pool is not None:
            sync_pool.close()


async def _fork(
    conn: psycopg.AsyncConnection[Any], source: StoredSession, fork: StoredSession, cuts: Cuts
) -> tuple[StoredSession, bool] | None:
    """``PostgresDatabase.fork_session``'s one transaction."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        forked = await platform_facet.fork_session(conn, source, fork)
        if forked is None or not forked.created:
            return None if forked is None else (forked.session, False)
        for copied, target in copies(source, forked):
            await state_facet.copy(conn, copied, target)
        for ns, key, keep in cuts_of(forked.session, cuts):
            await state_facet.keep_first(conn, ns, key, keep)
    return forked.session, True
