"""The platform facet on PostgreSQL: many server processes sharing one database.

psycopg 3 async over the database's pool (the one every facet of a process shares). Every
operation is one statement, or one short transaction of a few statements that holds no lock
across anything but its own statements; the SQL is ``sql/platform.py``'s, through
``platform_sql.pg()``, and ``platform_sql.py`` holds only what PostgreSQL's READ COMMITTED needs on
top (row locks that make the "other rows" guards true; see its docstring). Connection trouble becomes ``Unavailable`` in
``aconnection``; a unique violation on the idempotency index means "the first run won".
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from ...errors import NotFound, SessionBusy
from .. import dump
from ..base import PlatformFacet, RunEventLog
from ..records import (
    FINISHED,
    NULL,
    AgentStats,
    Claimed,
    Outcome,
    RunContext,
    RunFilter,
    StoredInvocation,
    StoredKey,
    StoredRun,
    StoredSession,
    agent_stats,
    finished_status,
)
from ..remembered import Answer, Memo, Remembered
from ..session_forks import Forked
from ..sql import events as events_sql
from ..sql import platform as sql
from . import platform_sql as pg_sql
from . import remembering, state_once
from .db import aconnection
from .events import PostgresEventLog
from .platform_sql import pg

FIRST_KEY_LOCK = 0x6B657973  # "keys": serialises the bootstrap of the first admin key

try:
    import psycopg
    import psycopg_pool
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

COMPONENT = "platform"
T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]
Row = tuple[Any, ...]


class PostgresPlatform(PlatformFacet):
    """The platform facet on one PostgreSQL database (the URL's schema, via ``search_path``)."""

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool) -> None:
        self.pool = pool
        self._events = PostgresEventLog(pool)

    @property
    def events(self) -> RunEventLog:
        return self._events

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        """A pooled connection (trouble → Unavailable). PostgreSQL text cannot hold U+0000, and no stored
        id does (ids are in the key charset), so a looked-up id holding one names nothing: NotFound."""
        try:
            async with aconnection(self.pool) as conn:
                yield conn
        except psycopg.DataError as error:
            if error.sqlstate is not None or "NUL" not in str(error):
                raise
            raise NotFound("no such record (an id holds U+0000)") from None

    async def _one(self, query: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> Row | None:
        async with self._conn() as conn:
            return await (await conn.execute(query, params)).fetchone()

    async def _all(self, query: str, params: tuple[Any, ...]) -> list[Row]:
        async with self._conn() as conn:
            return await (await conn.execute(query, params)).fetchall()

    # keys
    async def add_key(self, key: StoredKey, secret_hash: str) -> None:
        await self._write_key(pg(sql.INSERT_KEY), key, secret_hash)

    async def ensure_admin_key(self, key: StoredKey, secret_hash: str) -> None:
        await self._write_key(pg(sql.UPSERT_ADMIN_KEY), key, secret_hash, "admin")

    async def _write_key(self, query: str, key: StoredKey, secret_hash: str, role: str | None = None) -> None:
        async with self._conn() as conn, conn.transaction():
            await conn.execute(pg(sql.INSERT_ENV), (key.env, key.created_at))
            await conn.execute(query, (key.id, key.env, role or key.role, key.name, key.created_at, secret_hash))

    async def key_by_hash(self, secret_hash: str) -> StoredKey | None:
        row = await self._one(pg(sql.KEY_BY_HASH), (secret_hash,))
        return None if row is None else sql.key_from_row(row)

    async def list_keys(self, env: str) -> list[StoredKey]:
        return [sql.key_from_row(row) for row in await self._all(pg(sql.LIST_KEYS), (env,))]

    async def revoke_key(self, env: str, key_id: str, now: int) -> list[str] | None:
        """The key's row first (a claim holds it ``FOR SHARE`` until it commits), then, in a statement of
        its own — a fresh snapshot under READ COMMITTED, which sees any claim that went before — the
        invocations it holds."""
        async with self._conn() as conn, conn.transaction():
            if (await conn.execute(pg(sql.REVOKE_KEY), (env, key_id))).rowcount == 0:
                return None
            ended = [row[0] for row in await (await conn.execute(pg(sql.END_CLAIMS_OF), (key_id,))).fetchall()]
            async with conn.cursor() as cursor:
                await cursor.executemany(pg(sql.INTERRUPT_RUN), [(now, run_id) for run_id in ended])
        return ended

    async def has_keys(self) -> bool:
        return await self._one(pg(sql.ANY_KEY)) is not None

    async def add_first_key(self, key: StoredKey, secret_hash: str) -> bool:
        """Under READ COMMITTED two inserts would both see no key: take a transaction-scoped
        advisory lock first, so the insert's own snapshot (taken after the wait) sees the winner's."""
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (FIRST_KEY_LOCK,))
            params = (key.id, key.env, key.role, key.name, key.created_at, secret_hash)
            if (await conn.execute(pg(sql.INSERT_FIRST_KEY), params)).rowcount == 0:
                return False
            await conn.execute(pg(sql.INSERT_ENV), (key.env, key.created_at))
            return True

    # sessions
    async def create_session(self, session: StoredSession) -> tuple[StoredSession, bool]:
        """Insert, or read the one that won: ``ON CONFLICT DO NOTHING`` waits for a concurrent insert."""
        s = session
        async with self._conn() as conn:
            params = sql.session_params(s)
            row = await (await conn.execute(pg_sql.INSERT_SESSION, params)).fetchone()
            if row is not None:
                return sql.session_from_row(row), True
            row = await (await conn.execute(pg(sql.GET_SESSION), (s.env, s.id))).fetchone()
        if row is None:  # deleted between the two statements: as if it never existed, try again
            return await self.create_session(session)
        return sql.session_from_row(row), False

    async def register_session(self, session: StoredSession, agent: str) -> tuple[StoredSession, bool]:
        """One transaction holding the session row, as a session delete takes it first: the agent's row
        goes in before the delete reads the agents, or the delete went first and the session is made anew."""
        s = session
        params = sql.session_params(s)
        async with self._conn() as conn, conn.transaction():
            while True:
                inserted = await (await conn.execute(pg_sql.INSERT_SESSION, params)).fetchone()
                row = inserted or await (await conn.execute(pg_sql.LOCK_SESSION, (s.env, s.id))).fetchone()
                if row is not None:  # else deleted between the two statements: insert it again
                    break
            await conn.execute(pg(sql.INSERT_SESSION_AGENT), (s.env, s.id, agent))
        return sql.session_from_row(row), inserted is not None

    async def bind_user(self, env: str, user: str, owner: str) -> str:
        row = await self._one(pg(sql.BIND_USER), (env, user, owner))
        assert row is not None  # an upsert with RETURNING returns its row
        return str(row[0])

    async def add_session_agent(self, session: StoredSession, agent: str) -> bool:
        """The session row locked first, as a session delete takes it."""
        async with self._conn() as conn, conn.transaction():
            row = await (await conn.execute(pg_sql.LOCK_SESSION, (session.env, session.id))).fetchone()
            if row is None or sql.session_from_row(row).made != session.made:
                return False
            await conn.execute(pg(sql.INSERT_SESSION_AGENT), (session.env, session.id, agent))
        return True

    async def get_session(self, env: str, session_id: str) -> StoredSession | None:
        row = await self._one(pg(sql.GET_SESSION), (env, session_id))
        return None if row is None else sql.session_from_row(row)

    async def list_sessions(
        self, env: str, owner: str | None, user: str | None, after: int, limit: int, desc: bool = False
    ) -> list[StoredSession]:
        query, params = sql.list_sessions(env, owner, user, after, limit, desc)
        return [sql.session_from_row(row) for row in await self._all(pg(query), params)]

    async def session_agents(self, env: str, session_id: str) -> list[str]:
        return [row[0] for row in await self._all(pg(sql.SESSION_AGENTS), sql.of_session(env, session_id))]

    async def update_session(
        self, env: str, session_id: str, owner: str | None, metadata: bytes
    ) -> StoredSession | None:
        row = await self._one(pg(sql.UPDATE_SESSION), (metadata, env, session_id, owner, owner))
        return None if row is None else sql.session_from_row(row)

    # runs
    async def start_run(
        self, run: StoredRun, caller: str, invocation: StoredInvocation, multitask: str = "reject"
    ) -> tuple[StoredRun, bool]:
        try:
            async with self._conn() as conn, conn.transaction():
                return await _start_run(conn, run, caller, invocation, multitask)
        except psycopg.errors.UniqueViolation as error:
            if error.diag.constraint_name != pg_sql.IDEMPOTENCY_INDEX:
                raise
        first = await self._one(pg(sql.RUN_BY_IDEMPOTENCY), (run.env, caller, run.idempotency_key))
        assert first is not None  # the violation means it is committed
        return sql.run_from_row(first), False

    async def get_run(self, env: str, run_id: str) -> StoredRun | None:
        row = await self._one(pg(sql.GET_RUN), (env, run_id))
        return None if row is None else sql.run_from_row(row)

    async def list_runs(self, query: RunFilter) -> list[StoredRun]:
        statement, params = sql.list_runs(query)
        return [sql.run_from_row(row) for row in await self._all(pg(statement), params)]

    async def decide(
        self, env: str, run_id: str, decision: bytes, invocation: StoredInvocation, now: int
    ) -> StoredRun | None:
        """The run's session row is locked first, as ``delete_session`` does: the two serialise, so a
        decision never queues a resume in a session deleted meanwhile."""
        async with self._conn() as conn, conn.transaction():
            session = await (await conn.execute(pg(sql.SESSION_OF_RUN), (env, run_id))).fetchone()
            if session is not None and session[0] is not None:
                await conn.execute(pg_sql.LOCK_SESSION, (env, session[0]))
            params = (decision, now, invocation.queue_deadline, env, run_id)
            row = await (await conn.execute(pg(sql.DECIDE), params)).fetchone()
            if row is None:
                return None
            await conn.execute(pg(sql.INSERT_INVOCATION), sql.invocation_params(invocation))
        return sql.run_from_row(row)

    async def cancel(self, env: str, run_id: str, now: int) -> StoredRun | None:
        async with self._conn() as conn, conn.transaction():
            await conn.execute(pg_sql.LOCK_QUEUED_INVOCATIONS, (run_id,))
            await expire_overdue(conn, "run", now, (run_id,))
            row = await (await conn.execute(pg(sql.CANCEL_WAITING), (now, env, run_id))).fetchone()
            if row is not None:
                await conn.execute(pg(sql.CANCEL_QUEUED_INVOCATIONS), (run_id,))
            else:
                row = await (await conn.execute(pg(sql.REQUEST_CANCEL), (now, env, run_id))).fetchone()
            row = row or await (await conn.execute(pg(sql.GET_RUN), (env, run_id))).fetchone()
        return None if row is None else sql.run_from_row(row)

    # invocations
    async def has_queued(self, env: str, agents: list[str], now: int) -> bool:
        return await self._one(pg_sql.has_queued(agents), (env, *agents, now)) is not None

    async def claim(
        self, env: str, agents: list[str], token_hash: str, lease_until: int, now: int, claimer: str
    ) -> Claimed | None:
        """The claimer's key row is held ``FOR SHARE`` first: a revocation waits for this claim to commit
        (and then ends it), or this claim waits for the revocation and finds the key revoked."""
        async with self._conn() as conn, conn.transaction():
            if await (await conn.execute(pg_sql.LOCK_LIVE_KEY, (claimer,))).fetchone() is None:
                return None
            params = (token_hash, lease_until, claimer, env, *agents, now)
            row = await (await conn.execute(pg_sql.claim(agents), params)).fetchone()
            if row is None:
                return None
            invocation = sql.invocation_from_row(row)
            run_row = await (await conn.execute(pg(sql.START_RUN), (now, invocation.run_id))).fetchone()
        assert run_row is not None  # a queued invocation's run is queued (cancel ends both together)
        return Claimed(invocation, sql.run_from_row(run_row))

    async def token_context(self, token_hash: str) -> RunContext | None:
        row = await self._one(pg(sql.TOKEN_CONTEXT), (token_hash,))
        return None if row is None else RunContext(*row)

    async def token_lease(self, token_hash: str) -> int | None:
        row = await self._one(pg(sql.TOKEN_LEASE), (token_hash,))
        return None if row is None else int(row[0])

    async def heartbeat(self, invocation_id: str, token_hash: str, now: int, lease_until: int) -> bool | None:
        """The guarded lease extension, then a plain read of the run's flag (no guard depends on it)."""
        async with self._conn() as conn:
            params = (lease_until, invocation_id, token_hash, now)
            row = await (await conn.execute(pg(sql.HEARTBEAT), params)).fetchone()
            if row is None:
                return None
            flag = await (await conn.execute(pg(sql.RUN_CANCEL_REQUESTED), (row[0],))).fetchone()
        return bool(flag and flag[0])

    async def finish(self, invocation_id: str, token_hash: str, outcome: Outcome, now: int) -> StoredRun | None:
        async with self._conn() as conn, conn.transaction():
            params = (FINISHED[outcome.kind], invocation_id, token_hash, now)
            row = await (await conn.execute(pg(sql.END_INVOCATION), params)).fetchone()
            if row is None:
                return None
            run_id = row[0]
            flag = await (await conn.execute(pg_sql.LOCK_CANCEL_REQUESTED, (run_id,))).fetchone()
            status = finished_status(outcome.kind, bool(flag and flag[0]))
            extra = (NULL,) if outcome.kind == "hold" else ()
            query = pg_sql.FINISH_RUN[outcome.kind]
            ended = await (await conn.execute(query, (status, outcome.data, now, *extra, run_id))).fetchone()
        assert ended is not None  # the live invocation's run is running, and locked here
        return sql.run_from_row(ended)

    async def expire(self, now: int) -> int:
        row = await self._one(pg_sql.EXPIRE, {"now": now})
        return int(row[0]) if row else 0

    async def expire_queued(self, now: int) -> int:
        row = await self._one(pg_sql.EXPIRE_QUEUED, {"now": now})
        return int(row[0]) if row else 0

    # agents, retention
    async def touch_agents(self, env: str, agents: list[str], now: int) -> None:
        """In the agents' sorted order (``check_agents`` sorts them), so two claims never lock two rows crosswise."""
        async with self._conn() as conn, conn.transaction(), conn.cursor() as cursor:
            await cursor.executemany(pg(sql.TOUCH_AGENT), [(env, agent, now) for agent in sorted(agents)])

    async def agent_stats(self, env: str | None) -> list[AgentStats]:
        """The three reads in one REPEATABLE READ transaction: one snapshot, as SQLite's read has."""
        queries, params = sql.agent_queries(env)
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            found = [await (await conn.execute(pg(query), params)).fetchall() for query in queries]
        return agent_stats(*found)

    async def purge_runs(self, before: int, limit: int) -> int:
        row = await self._one(pg_sql.PURGE, {"before": before, "limit": limit})
        return int(row[0]) if row else 0

    async def recall(self, caller: str, key: str) -> Remembered | None:
        async with self._conn() as conn:
            return await remembering.recall(conn, caller, key)

    def rendered(self, memo: Memo, found: Remembered) -> Remembered:
        return remembering.rendered(memo, found)

    async def remember(self, memo: Memo, work: Callable[[], Awaitable[T]]) -> T | Remembered:
        if memo.one_write:  # one statement writes and keeps its answer, unless the write needs its lock
            with contextlib.suppress(state_once.Locked):
                return await state_once.remember(memo, work)
        return await remembering.remember(self.pool, memo, work)

    async def keep(self, memo: Memo, answer: Answer, now: int) -> None:
        await remembering.keep(self.pool, memo, answer, now)

    async def purge_remembered(self, before: int, limit: int) -> int:
        return await remembering.purge(self.pool, before, limit)

    async def count_remembered(self, before: int) -> int:
        row = await self._one(remembering.COUNT_OLD, (before,))
        return int(row[0]) if row else 0

    async def count_purgeable(self, before: int) -> int:
        row = await self._one(pg(sql.COUNT_PURGEABLE), (before,))
        return int(row[0]) if row else 0

    # export and import: rows as ``dump.py`` moves them, the same layout as SQLite's
    async def dump(self, table: str) -> list[dict[str, Any]]:
        dump.check_table(table, [])
        async with self._conn() as conn:
            cursor = await conn.execute(pg_sql.dump(table))
            columns = [column.name for column in cursor.description or ()]
            return [dump.exported(table, dump.encode_row(columns, row)) for row in await cursor.fetchall()]

    async def load(self, table: str, rows: list[dict[str, Any]]) -> int:
        """Insert as exported (``seq`` kept), keep rows already there, then move the numbering past them."""
        added = 0
        async with self._conn() as conn, conn.transaction():
            for row in rows:
                dump.check_table(table, list(row))
                cursor = await conn.execute(pg_sql.load(table, tuple(row)), tuple(dump.decode_row(row).values()))
                added += max(cursor.rowcount, 0)
            if table in pg_sql.NUMBERED:
                await conn.execute(pg_sql.renumber(table))
            if table == "ks_run_events":
                async with conn.cursor() as cursor:
                    head = pg(events_sql.HEAD_PAST_EVENTS["postgres"])
                    await cursor.executemany(head, [(run,) for run in dump.runs_of(rows)])
        return added


async def _start_run(
    conn: Conn, run: StoredRun, caller: str, invocation: StoredInvocation, multitask: str
) -> tuple[StoredRun, bool]:
    """In one transaction: the session row locked first, so the "no active run" guard sees every commit, and
    the turns of a session get their ``seq`` (the order they start in) in the order they commit."""
    session_exists = True
    if run.session_id is not None:
        locked = await (await conn.execute(pg_sql.LOCK_SESSION, (run.env, run.session_id))).fetchone()
        session_exists = locked is not None
    if run.idempotency_key is not None:
        params = (run.env, caller, run.idempotency_key)
        row = await (await conn.execute(pg(sql.RUN_BY_IDEMPOTENCY), params)).fetchone()
        if row is not None:
            return sql.run_from_row(row), False
    if not session_exists:
        raise NotFound(f"no session {run.session_id!r}")
    if run.session_id is not None:
        await expire_overdue(conn, "session", run.created_at, (run.env, run.session_id))
        if multitask == "interrupt":
            for statement, params in sql.interrupt_session(run.env, run.session_id, run.created_at):
                await conn.execute(pg(statement), params)
    stored = await _insert_run(conn, run, caller, multitask)
    await conn.execute(pg(sql.INSERT_INVOCATION), sql.invocation_params(invocation))
    return stored, True


async def _insert_run(conn: Conn, run: StoredRun, caller: str, multitask: str) -> StoredRun:
    if run.session_id is None:
        query, params = sql.INSERT_RUN, sql.run_params(run, caller)
    else:
        query, params = sql.session_run(run, caller, multitask)
    row = await (await conn.execute(pg_sql.returning_run(query), params)).fetchone()
    if row is None:
        raise SessionBusy(f"session {run.session_id!r} has a queued or running run")
    if run.session_id is not None:
        await conn.execute(pg(sql.INSERT_SESSION_AGENT), (run.env, run.session_id, run.agent))
    return sql.run_from_row(row)


async def expire_overdue(conn: Conn, scope: str, now: int, params: tuple[str, ...]) -> int:
    """Queued runs of ``scope`` (``sql.EXPIRY_SCOPES``) past their deadline → expired, invocations first
    (the order a claim locks them), inside the caller's transaction; how many runs."""
    await conn.execute(pg(sql.expire_invocations(scope)), (now, *params))
    return len(await (await conn.execute(pg(sql.expire_runs(scope)), (now, now, *params))).fetchall())


async def delete_session(conn: Conn, env: str, session_id: str, now: int) -> list[str] | None:
    """Delete an idle session, cancel its held runs and forget its registered agents inside the caller's
    transaction (a step of ``PostgresDatabase.delete_session``); its agents (of its runs and
    registered), None when absent. The session row is locked first, as a turn, a decision and a
    registration lock it, so they serialise; its runs queued past their deadline expire then, and do
    not keep it."""
    if await (await conn.execute(pg_sql.LOCK_SESSION, (env, session_id))).fetchone() is None:
        return None
    await expire_overdue(conn, "session", now, (env, session_id))
    cur = await conn.execute(pg(sql.DELETE_IDLE_SESSION), (env, session_id, env, session_id))
    if cur.rowcount == 0:
        raise SessionBusy(f"session {session_id!r} has a queued or running run")
    await conn.execute(pg(sql.CANCEL_HELD_OF_SESSION), (now, env, session_id))
    await conn.execute(pg(events_sql.DELETE_OF_SESSION), (env, session_id))
    rows = await (await conn.execute(pg(sql.SESSION_AGENTS), sql.of_session(env, session_id))).fetchall()
    await conn.execute(pg(sql.DELETE_SESSION_AGENTS), (env, session_id))
    return [row[0] for row in rows]


async def fork_session(conn: Conn, source: StoredSession, fork: StoredSession) -> Forked | None:
    """The platform's part of a fork inside the caller's REPEATABLE READ transaction (a step of
    ``PostgresDatabase.fork_session``): the fork's row and the source's agents recorded in it, read in
    the snapshot its state is copied from; None when the source is gone."""
    row = await (await conn.execute(pg(sql.GET_SESSION), (source.env, source.id))).fetchone()
    if row is None or sql.session_from_row(row).made != source.made:
        return None
    inserted = await (await conn.execute(pg_sql.INSERT_SESSION, sql.session_params(fork))).fetchone()
    if inserted is None:  # it is in this snapshot, or the insert raised a serialization failure
        existing = await (await conn.execute(pg(sql.GET_SESSION), (fork.env, fork.id))).fetchone()
        assert existing is not None  # a conflict with a row this snapshot cannot see raises instead
        return Forked(sql.session_from_row(existing), False, [])
    rows = await (await conn.execute(pg(sql.SESSION_AGENTS), sql.of_session(source.env, source.id))).fetchall()
    agents = [row[0] for row in rows]
    async with conn.cursor() as cursor:
        await cursor.executemany(pg(sql.INSERT_SESSION_AGENT), [(fork.env, fork.id, agent) for agent in agents])
    return Forked(sql.session_from_row(inserted), True, agents)
