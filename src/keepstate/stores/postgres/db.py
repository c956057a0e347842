"""PostgreSQL connections for every part of keepstate: pools, error translation, migrations.

psycopg 3. Async parts (server, platform, session store) use an ``AsyncConnectionPool``; the
synchronous harness store uses a sync pool built the same way. Connections are checked before use
only after sitting idle a second (a check costs a round trip), so a restarted server is
noticed and the pool reconnects by itself; while PostgreSQL is away every
call fails fast with ``Unavailable`` (connect timeout and pool wait both short), never a hang.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

from ...errors import NotFound, Unavailable
from ...values import MAX_VERSION
from ..ending import cancel_requests, raise_lost_cancel
from ..migrations import pending_steps
from ..records import VERSION_LIMIT, version_limit

try:
    import psycopg
    import psycopg_pool
    from psycopg_pool.pool_async import MaintenanceTask, StopWorker
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

CONNECT_TIMEOUT_S = 3
POOL_WAIT_S = 5.0
DOWN_WAIT_S = 0.5
CHECK_IDLE_S = 1.0
SCHEMA_TABLE = "keepstate_schema"
_MIGRATION_LOCK = 0x6B656570  # "keep": one advisory lock id for every keepstate migration

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg_pool.PoolTimeout,
    psycopg_pool.PoolClosed,
    OSError,
    # the database is there but this URL cannot use it: a search_path naming no schema, no rights to it
    psycopg.errors.InvalidSchemaName,
    psycopg.errors.InsufficientPrivilege,
    psycopg.errors.ReadOnlySqlTransaction,
)


def pg_url(url: str) -> str:
    """Accept ``postgres://`` as well as ``postgresql://``; psycopg takes either URL as conninfo."""
    if url.startswith("postgres://"):
        return "postgresql://" + url[len("postgres://") :]
    if not url.startswith("postgresql://"):
        raise ValueError(f"not a PostgreSQL store URL: {url!r}")
    return url


def _connect_kwargs() -> dict[str, Any]:
    """Fail fast on a dead or silent server: a connect timeout, TCP keepalives, and a bound on how
    long sent data may go unacknowledged (``tcp_user_timeout``), so a hung network is an error."""
    return {
        "autocommit": True,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 15_000,
    }


async def connect_alone(url: str, name: str) -> psycopg.AsyncConnection[Any]:
    """A connection outside every pool, with the pool's settings and ``application_name`` ``name``: one
    that waits on the server for as long as the process runs (a LISTEN)."""
    return await psycopg.AsyncConnection.connect(pg_url(url), **_connect_kwargs(), application_name=name)


@contextmanager
def translate_errors() -> Iterator[None]:
    """Connection trouble becomes Unavailable, a write refused by ``version_guard`` its own error; a bug
    (bad SQL) stays what it is."""
    try:
        yield
    except _UNAVAILABLE as error:
        raise Unavailable("postgresql: " + " ".join(str(error).split())) from error
    except psycopg.errors.CheckViolation as error:
        if (error.diag.constraint_name or "").endswith(VERSION_LIMIT):
            raise version_limit() from None
        raise


def version_guard(table: str) -> str:
    """A check refusing any write that would take a row of ``table`` past ``values.MAX_VERSION``
    (``NOT VALID``: existing rows are not scanned, every new or changed one is checked); the statement
    fails and ``translate_errors`` raises ``records.version_limit``."""
    return f"ALTER TABLE {table} ADD CONSTRAINT {table}_{VERSION_LIMIT} CHECK (version <= {MAX_VERSION}) NOT VALID;"


class _AsyncPool(psycopg_pool.AsyncConnectionPool):
    """A pool that remembers whether its last connection attempt failed, to fail fast while down.

    Without it every call during an outage waits the full ``POOL_WAIT_S`` for a connection that
    cannot come; with it only the first does, the rest wait ``DOWN_WAIT_S`` (still enough to get a
    connection the moment the server is back, which clears the mark). Connections are checked before
    use only when not taken for ``CHECK_IDLE_S`` (a busy connection proves itself; a broken one fails
    its call with Unavailable and the pool drops it). The time is stamped when a connection is
    taken, not returned: a ``reset`` hook would send every return through the pool's worker, a
    task (or thread) switch per call: measured, one-row harness appends ran ~15% faster without it.
    """

    def __init__(self, conninfo: str, **kwargs: Any) -> None:
        self.down = False
        self.taken: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()
        super().__init__(conninfo, configure=self.connected, check=self.check_if_idle, **kwargs)

    async def check_if_idle(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Check a connection only after it sat unused: a checked call costs a second round trip."""
        now = time.monotonic()
        if now - self.taken.get(conn, 0.0) > CHECK_IDLE_S:
            await psycopg_pool.AsyncConnectionPool.check_connection(conn)
        self.taken[conn] = now

    async def connected(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.down = False

    async def reconnect_failed(self) -> None:
        self.down = True
        await super().reconnect_failed()

    def run_task(self, task: MaintenanceTask) -> None:
        """Every maintenance task but the one that stops a worker runs as a ``_CancelKept``."""
        super().run_task(task if isinstance(task, StopWorker) else _CancelKept(self, task))


class _CancelKept(MaintenanceTask):
    """A pool maintenance task whose worker, cancelled while it ran, ends at its next wait.

    psycopg_pool's workers catch ``CancelledError`` as a failed task (a connection attempt logs "error
    connecting" and goes on), then wait for the next task with the cancellation spent: a loop ending
    (``asyncio.run``, a test runner) while its pool was opening a connection cancelled that worker once
    and waited for it forever. Cancelled again here, the worker ends at its queue as a stopped one does.
    """

    def __init__(self, pool: _AsyncPool, task: MaintenanceTask) -> None:
        super().__init__(pool)
        self.task = task

    async def _run(self, pool: psycopg_pool.AsyncConnectionPool[Any]) -> None:
        before = cancel_requests()
        try:
            await self.task.run()
        finally:
            current = asyncio.current_task()
            if current is not None and cancel_requests() > before:
                current.cancel()

    def __repr__(self) -> str:
        return repr(self.task)


async def open_async_pool(url: str, max_size: int = 16) -> psycopg_pool.AsyncConnectionPool:
    """An opened async pool; raises Unavailable, with the server's reason, when it cannot be reached.

    One direct connection comes first: the pool only logs why it could not connect and, after its
    wait, says "pool initialization incomplete"; the connection says "connection refused",
    "database ... does not exist" or "password authentication failed", within the connect timeout.
    """
    with translate_errors():
        probe = await psycopg.AsyncConnection.connect(pg_url(url), **_connect_kwargs())
        await probe.close()
    pool = _AsyncPool(
        pg_url(url),
        min_size=1,
        max_size=max_size,
        kwargs=_connect_kwargs(),
        open=False,
        timeout=POOL_WAIT_S,
        reconnect_timeout=0,
    )
    with translate_errors():
        await pool.open(wait=True, timeout=POOL_WAIT_S)
    return pool


class _Pool(psycopg_pool.ConnectionPool):
    """The sync twin of ``_AsyncPool``: fails fast while the server is down, checks only idle connections."""

    def __init__(self, conninfo: str, **kwargs: Any) -> None:
        self.down = False
        self.taken: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = weakref.WeakKeyDictionary()
        super().__init__(conninfo, configure=self.connected, check=self.check_if_idle, **kwargs)

    def check_if_idle(self, conn: psycopg.Connection[Any]) -> None:
        """Check a connection only after it sat unused: a checked call costs a second round trip."""
        now = time.monotonic()
        if now - self.taken.get(conn, 0.0) > CHECK_IDLE_S:
            psycopg_pool.ConnectionPool.check_connection(conn)
        self.taken[conn] = now

    def connected(self, conn: psycopg.Connection[Any]) -> None:
        self.down = False

    def reconnect_failed(self) -> None:
        self.down = True
        super().reconnect_failed()


def open_pool(url: str, max_size: int = 8) -> psycopg_pool.ConnectionPool:
    """An opened sync pool; raises Unavailable, with the server's reason (as ``open_async_pool``)."""
    with translate_errors(), psycopg.Connection.connect(pg_url(url), **_connect_kwargs()):
        pass
    pool = _Pool(
        pg_url(url),
        min_size=1,
        max_size=max_size,
        kwargs=_connect_kwargs(),
        open=False,
        timeout=POOL_WAIT_S,
        reconnect_timeout=0,
    )
    with translate_errors():
        pool.open(wait=True, timeout=POOL_WAIT_S)
    return pool


HELD: ContextVar[tuple[Any, psycopg.AsyncConnection[Any]] | None] = ContextVar("keepstate_pg_held", default=None)
"""The pool and connection of the idempotent write running in this context (``remembered.py``): every
statement of its ``work`` runs in that one transaction, nested ``transaction()`` blocks as savepoints."""


@asynccontextmanager
async def aconnection(pool: psycopg_pool.AsyncConnectionPool) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A pooled connection, with connection trouble translated to Unavailable.

    A cancellation that arrives while waiting for the connection is never lost: the pool's wait
    can swallow it (see ``raise_lost_cancel``), and a lease renewer cancelled that way renewed
    forever. It is raised here instead, the connection going straight back to the pool.
    """
    held = HELD.get()
    if held is not None and held[0] is pool:  # inside an idempotent write's transaction: its connection
        with translate_errors():
            yield held[1]
        return
    wait = DOWN_WAIT_S if getattr(pool, "down", False) else None
    before = cancel_requests()
    with translate_errors():
        async with pool.connection(timeout=wait) as conn:
            raise_lost_cancel(before)
            yield conn


@contextmanager
def connection(pool: psycopg_pool.ConnectionPool) -> Iterator[psycopg.Connection[Any]]:
    """The sync twin of ``aconnection``."""
    wait = DOWN_WAIT_S if getattr(pool, "down", False) else None
    with translate_errors(), pool.connection(timeout=wait) as conn:
        yield conn


def _migration_sql() -> tuple[str, str, str]:
    return (
        f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (component TEXT PRIMARY KEY, version INTEGER NOT NULL)",
        f"SELECT version FROM {SCHEMA_TABLE} WHERE component = %s",
        f"INSERT INTO {SCHEMA_TABLE} (component, version) VALUES (%s, %s) "
        "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
    )


async def amigrate(pool: psycopg_pool.AsyncConnectionPool, component: str, steps: Sequence[str]) -> None:
    """Apply ``component``'s pending steps under a transaction-scoped advisory lock."""
    create, select, record = _migration_sql()
    async with aconnection(pool) as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await conn.execute(create)
        row = await (await conn.execute(select, (component,))).fetchone()
        for version, script in pending_steps(steps, row[0] if row else 0):
            await conn.execute(script)
            await conn.execute(record, (component, version))


def migrate(pool: psycopg_pool.ConnectionPool, component: str, steps: Sequence[str]) -> None:
    """The sync twin of ``amigrate`` for the synchronous harness store."""
    create, select, record = _migration_sql()
    with connection(pool) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(create)
        row = conn.execute(select, (component,)).fetchone()
        for version, script in pending_steps(steps, row[0] if row else 0):
            conn.execute(script)
            conn.execute(record, (component, version))


def require_store(url: str) -> None:
    """NotFound unless the URL's database and schema hold keepstate's tables; one direct connection,
    creating nothing (for the commands that only read)."""
    with translate_errors(), psycopg.connect(pg_url(url), **_connect_kwargs()) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (SCHEMA_TABLE,)).fetchone()
    if found is None or found[0] is None:
        raise NotFound("no keepstate store in this PostgreSQL database and schema: its tables are not there")
