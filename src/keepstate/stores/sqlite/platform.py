"""The platform facet on SQLite: reads on the caller's thread, writes group-committed.

Every write is a function run by ``SqliteFile.awrite`` in its single writer thread, inside one
``BEGIN IMMEDIATE`` transaction (under its own savepoint): the guards in ``sql/platform.py`` and the
few statements of one operation are atomic together, also against other processes on the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ... import offload
from ...clock import now_ms
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
from ..sql import remembered as remembered_sql
from . import remembering
from .db import SqliteFile
from .events import SqliteEventLog

T = TypeVar("T")
COMPONENT = "platform"


class SqlitePlatform(PlatformFacet):
    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        db.migrate(COMPONENT, sql.SQLITE_SCHEMA)
        self._events = SqliteEventLog(db)

    @property
    def events(self) -> RunEventLog:
        return self._events

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.db.aread(fn)

    async def _one(self, query: str, params: tuple[object, ...]) -> tuple[object, ...] | None:
        """One single-statement read, atomic on its own: no BEGIN/COMMIT round (the hot path)."""
        row: tuple[object, ...] | None = self.db.fetchone(query, params)
        return row

    # keys
    async def add_key(self, key: StoredKey, secret_hash: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(sql.INSERT_ENV, (key.env, key.created_at))
            conn.execute(sql.INSERT_KEY, (key.id, key.env, key.role, key.name, key.created_at, secret_hash))

        await self.db.awrite(write)

    async def ensure_admin_key(self, key: StoredKey, secret_hash: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(sql.INSERT_ENV, (key.env, key.created_at))
            conn.execute(sql.UPSERT_ADMIN_KEY, (key.id, key.env, "admin", key.name, key.created_at, secret_hash))

        await self.db.awrite(write)

    async def key_by_hash(self, secret_hash: str) -> StoredKey | None:
        row = await self._one(sql.KEY_BY_HASH, (secret_hash,))
        return None if row is None else sql.key_from_row(row)

    async def list_keys(self, env: str) -> list[StoredKey]:
        rows = await self._read(lambda c: c.execute(sql.LIST_KEYS, (env,)).fetchall())
        return [sql.key_from_row(row) for row in rows]

    async def revoke_key(self, env: str, key_id: str, now: int) -> list[str] | None:
        """One transaction of the file's one writer: a claim by the key comes wholly before or after it."""

        def write(conn: sqlite3.Connection) -> list[str] | None:
            if conn.execute(sql.REVOKE_KEY, (env, key_id)).rowcount == 0:
                return None
            ended = [row[0] for row in conn.execute(sql.END_CLAIMS_OF, (key_id,)).fetchall()]
            conn.executemany(sql.INTERRUPT_RUN, [(now, run_id) for run_id in ended])
            return ended

        return await self.db.awrite(write)

    async def has_keys(self) -> bool:
        return await self._read(lambda c: c.execute(sql.ANY_KEY).fetchone() is not None)

    async def add_first_key(self, key: StoredKey, secret_hash: str) -> bool:
        """One ``BEGIN IMMEDIATE`` transaction: writers are serialised, so the check holds."""

        def write(conn: sqlite3.Connection) -> bool:
            params = (key.id, key.env, key.role, key.name, key.created_at, secret_hash)
            if conn.execute(sql.INSERT_FIRST_KEY, params).rowcount == 0:
                return False
            conn.execute(sql.INSERT_ENV, (key.env, key.created_at))
            return True

        return await self.db.awrite(write)

    # sessions
    async def create_session(self, session: StoredSession) -> tuple[StoredSession, bool]:
        return await self.db.awrite(lambda conn: _insert_session(conn, session))

    async def bind_user(self, env: str, user: str, owner: str) -> str:
        return await self.db.awrite(lambda conn: str(conn.execute(sql.BIND_USER, (env, user, owner)).fetchone()[0]))

    async def register_session(self, session: StoredSession, agent: str) -> tuple[StoredSession, bool]:
        """One transaction of the file's one writer: a session delete comes wholly before or after it."""

        def write(conn: sqlite3.Connection) -> tuple[StoredSession, bool]:
            stored = _insert_session(conn, session)
            conn.execute(sql.INSERT_SESSION_AGENT, (session.env, session.id, agent))
            return stored

        return await self.db.awrite(write)

    async def add_session_agent(self, session: StoredSession, agent: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            row = conn.execute(sql.GET_SESSION, (session.env, session.id)).fetchone()
            if row is None or sql.session_from_row(row).made != session.made:
                return False
            conn.execute(sql.INSERT_SESSION_AGENT, (session.env, session.id, agent))
            return True

        return await self.db.awrite(write)

    async def get_session(self, env: str, session_id: str) -> StoredSession | None:
        row = await self._read(lambda c: c.execute(sql.GET_SESSION, (env, session_id)).fetchone())
        return None if row is None else sql.session_from_row(row)

    async def list_sessions(
        self, env: str, owner: str | None, user: str | None, after: int, limit: int, desc: bool = False
    ) -> list[StoredSession]:
        query, params = sql.list_sessions(env, owner, user, after, limit, desc)
        rows = await self._read(lambda c: c.execute(query, params).fetchall())
        return [sql.session_from_row(row) for row in rows]

    async def session_agents(self, env: str, session_id: str) -> list[str]:
        rows = await self._read(lambda c: c.execute(sql.SESSION_AGENTS, sql.of_session(env, session_id)).fetchall())
        return [row[0] for row in rows]

    async def update_session(
        self, env: str, session_id: str, owner: str | None, metadata: bytes
    ) -> StoredSession | None:
        params = (metadata, env, session_id, owner, owner)
        row = await self.db.awrite(lambda c: c.execute(sql.UPDATE_SESSION, params).fetchone())
        return None if row is None else sql.session_from_row(row)

    # runs
    async def start_run(
        self, run: StoredRun, caller: str, invocation: StoredInvocation, multitask: str = "reject"
    ) -> tuple[StoredRun, bool]:
        def write(conn: sqlite3.Connection) -> tuple[StoredRun, bool]:
            if run.idempotency_key is not None:
                row = conn.execute(sql.RUN_BY_IDEMPOTENCY, (run.env, caller, run.idempotency_key)).fetchone()
                if row is not None:
                    return sql.run_from_row(row), False
            if run.session_id is not None:
                expire_overdue(conn, "session", run.created_at, (run.env, run.session_id))
                if multitask == "interrupt":
                    for statement, params in sql.interrupt_session(run.env, run.session_id, run.created_at):
                        conn.execute(statement, params)
            _insert_run(conn, run, caller, multitask)
            conn.execute(sql.INSERT_INVOCATION, sql.invocation_params(invocation))
            return sql.run_from_row(conn.execute(sql.GET_RUN, (run.env, run.id)).fetchone()), True

        return await self.db.awrite(write)

    async def get_run(self, env: str, run_id: str) -> StoredRun | None:
        row = await self._read(lambda c: c.execute(sql.GET_RUN, (env, run_id)).fetchone())
        return None if row is None else sql.run_from_row(row)

    async def list_runs(self, query: RunFilter) -> list[StoredRun]:
        statement, params = sql.list_runs(query)
        rows = await self._read(lambda c: c.execute(statement, params).fetchall())
        return [sql.run_from_row(row) for row in rows]

    async def decide(
        self, env: str, run_id: str, decision: bytes, invocation: StoredInvocation, now: int
    ) -> StoredRun | None:
        def write(conn: sqlite3.Connection) -> StoredRun | None:
            row = conn.execute(sql.DECIDE, (decision, now, invocation.queue_deadline, env, run_id)).fetchone()
            if row is None:
                return None
            conn.execute(sql.INSERT_INVOCATION, sql.invocation_params(invocation))
            return sql.run_from_row(row)

        return await self.db.awrite(write)

    async def cancel(self, env: str, run_id: str, now: int) -> StoredRun | None:
        def write(conn: sqlite3.Connection) -> StoredRun | None:
            expire_overdue(conn, "run", now, (run_id,))
            row = conn.execute(sql.CANCEL_WAITING, (now, env, run_id)).fetchone()
            if row is not None:
                conn.execute(sql.CANCEL_QUEUED_INVOCATIONS, (run_id,))
            else:
                row = conn.execute(sql.REQUEST_CANCEL, (now, env, run_id)).fetchone()
            row = row or conn.execute(sql.GET_RUN, (env, run_id)).fetchone()
            return None if row is None else sql.run_from_row(row)

        return await self.db.awrite(write)

    # invocations
    async def has_queued(self, env: str, agents: list[str], now: int) -> bool:
        query = sql.has_queued(agents)
        return await self._read(lambda c: c.execute(query, (env, *agents, now)).fetchone() is not None)

    async def claim(
        self, env: str, agents: list[str], token_hash: str, lease_until: int, now: int, claimer: str
    ) -> Claimed | None:
        query = sql.claim(agents)

        def write(conn: sqlite3.Connection) -> Claimed | None:
            row = conn.execute(query, (token_hash, lease_until, claimer, env, *agents, now, claimer)).fetchone()
            if row is None:
                return None
            invocation = sql.invocation_from_row(row)
            run_row = conn.execute(sql.START_RUN, (now, invocation.run_id)).fetchone()
            return Claimed(invocation, sql.run_from_row(run_row))

        return await self.db.awrite(write)

    async def token_context(self, token_hash: str) -> RunContext | None:
        row = await self._one(sql.TOKEN_CONTEXT, (token_hash,))
        return None if row is None else RunContext(*row)  # type: ignore[arg-type]

    async def token_lease(self, token_hash: str) -> int | None:
        row = self.db.fetchone(sql.TOKEN_LEASE, (token_hash,))
        return None if row is None else int(row[0])

    async def heartbeat(self, invocation_id: str, token_hash: str, now: int, lease_until: int) -> bool | None:
        def write(conn: sqlite3.Connection) -> bool | None:
            row = conn.execute(sql.HEARTBEAT, (lease_until, invocation_id, token_hash, now)).fetchone()
            if row is None:
                return None
            return bool(conn.execute(sql.RUN_CANCEL_REQUESTED, (row[0],)).fetchone()[0])

        return await self.db.awrite(write)

    async def finish(self, invocation_id: str, token_hash: str, outcome: Outcome, now: int) -> StoredRun | None:
        def write(conn: sqlite3.Connection) -> StoredRun | None:
            ended = FINISHED[outcome.kind]
            row = conn.execute(sql.END_INVOCATION, (ended, invocation_id, token_hash, now)).fetchone()
            if row is None:
                return None
            run_id = row[0]
            cancel = bool(conn.execute(sql.RUN_CANCEL_REQUESTED, (run_id,)).fetchone()[0])
            params = (finished_status(outcome.kind, cancel), outcome.data, now)
            extra = (NULL,) if outcome.kind == "hold" else ()
            conn.execute(sql.FINISH_RUN[outcome.kind], (*params, *extra, run_id))
            return sql.run_from_row(conn.execute(sql.RUN_BY_ID, (run_id,)).fetchone())

        return await self.db.awrite(write)

    async def expire(self, now: int) -> int:
        def write(conn: sqlite3.Connection) -> int:
            lost = [row[0] for row in conn.execute(sql.EXPIRE_INVOCATIONS, (now,)).fetchall()]
            for run_id in lost:
                conn.execute(sql.INTERRUPT_RUN, (now, run_id))
            return len(lost)

        return await self.db.awrite(write)

    async def expire_queued(self, now: int) -> int:
        """A cheap read first: the sweep runs every second on every server, and almost always finds nothing."""
        if self.db.fetchone(sql.ANY_OVERDUE, (now,)) is None:
            return 0
        return await self.db.awrite(lambda conn: expire_overdue(conn, "all", now, ()))

    # agents, retention
    async def touch_agents(self, env: str, agents: list[str], now: int) -> None:
        rows = [(env, agent, now) for agent in agents]
        await self.db.awrite(lambda conn: conn.executemany(sql.TOUCH_AGENT, rows))

    async def agent_stats(self, env: str | None) -> list[AgentStats]:
        """Counting every run of a large store takes milliseconds: on a thread of its own, not the event loop's."""
        queries, params = sql.agent_queries(env)

        def read(conn: sqlite3.Connection) -> list[AgentStats]:
            return agent_stats(*(conn.execute(query, params).fetchall() for query in queries))

        return await offload.run("scan", self.db.read, read)

    async def purge_runs(self, before: int, limit: int) -> int:
        def write(conn: sqlite3.Connection) -> int:
            gone = conn.execute(sql.PURGE_RUNS, (before, limit)).fetchall()
            conn.executemany(sql.PURGE_INVOCATIONS, gone)
            return len(gone)

        return await self.db.awrite(write)

    async def recall(self, caller: str, key: str) -> Remembered | None:
        return await self._read(lambda conn: remembering.recall(conn, caller, key))

    async def remember(self, memo: Memo, work: Callable[[], Awaitable[T]]) -> T | Remembered:
        if not memo.one_write:  # a run's write checks the run first: a repeat is answered before that
            found = await self.recall(memo.caller, memo.key)  # the write checks again, in its transaction
            if found is not None:
                return found
        with remembering.Attempt(memo) as attempt:
            result = await work()
        if attempt.replayed is not None:
            return attempt.replayed
        answer = attempt.unkept(result)  # work wrote nothing (an absent key's delete): its answer still stands
        if answer is not None:
            await self.keep(memo, answer, now_ms())
        return result

    def remember_sync(self, memo: Memo, work: Callable[[], T]) -> T | Remembered:
        """``remember`` for a write of the sync face, on the caller's thread (``Database.remember_sync``): one
        state write, which looks its key up in its own transaction (no read before it: a repeat is rare)."""
        with remembering.Attempt(memo) as attempt:
            result = work()
        if attempt.replayed is not None:
            return attempt.replayed
        answer = attempt.unkept(result)
        if answer is not None:
            self.db.write(
                lambda conn: remembering.keep(conn, memo.caller, memo.key, memo.fingerprint, answer, now_ms())
            )
        return result

    async def keep(self, memo: Memo, answer: Answer, now: int) -> None:
        await self.db.awrite(lambda conn: remembering.keep(conn, memo.caller, memo.key, memo.fingerprint, answer, now))

    async def purge_remembered(self, before: int, limit: int) -> int:
        return await self.db.awrite(lambda conn: conn.execute(remembered_sql.PURGE, (before, limit)).rowcount)

    async def count_remembered(self, before: int) -> int:
        return int(self.db.fetchone(remembered_sql.COUNT_OLD, (before,))[0])

    async def count_purgeable(self, before: int) -> int:
        row = await offload.run("scan", self.db.read, lambda c: c.execute(sql.COUNT_PURGEABLE, (before,)).fetchone())
        return int(row[0])

    async def dump(self, table: str) -> list[dict[str, Any]]:
        dump.check_table(table, [])

        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            cursor = conn.execute(f"SELECT * FROM {table} ORDER BY {dump.order_by(table)}")
            columns = [column[0] for column in cursor.description]
            return [dump.exported(table, dump.encode_row(columns, row)) for row in cursor.fetchall()]

        return await self._read(read)

    async def load(self, table: str, rows: list[dict[str, Any]]) -> int:
        def write(conn: sqlite3.Connection) -> int:
            added = 0
            for row in rows:
                dump.check_table(table, list(row))
                names = ", ".join(row)
                marks = ", ".join("?" for _ in row)
                insert = f"INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT DO NOTHING"
                added += conn.execute(insert, tuple(dump.decode_row(row).values())).rowcount
            if table == "ks_run_events":
                conn.executemany(events_sql.HEAD_PAST_EVENTS["sqlite"], [(run,) for run in dump.runs_of(rows)])
            return added

        return await self.db.awrite(write)


def _insert_session(conn: sqlite3.Connection, s: StoredSession) -> tuple[StoredSession, bool]:
    """Insert unless the id exists; the session as stored and whether it is new."""
    cur = conn.execute(sql.INSERT_SESSION, sql.session_params(s))
    row = conn.execute(sql.GET_SESSION, (s.env, s.id)).fetchone()
    return sql.session_from_row(row), cur.rowcount > 0


def _insert_run(conn: sqlite3.Connection, run: StoredRun, caller: str, multitask: str) -> None:
    if run.session_id is None:
        conn.execute(sql.INSERT_RUN, sql.run_params(run, caller))
        return
    if conn.execute(*sql.session_run(run, caller, multitask)).rowcount == 0:
        if conn.execute(sql.GET_SESSION, (run.env, run.session_id)).fetchone() is None:
            raise NotFound(f"no session {run.session_id!r}")
        raise SessionBusy(f"session {run.session_id!r} has a queued or running run")
    conn.execute(sql.INSERT_SESSION_AGENT, (run.env, run.session_id, run.agent))


def expire_overdue(conn: sqlite3.Connection, scope: str, now: int, params: tuple[str, ...]) -> int:
    """Queued runs of ``scope`` (``sql.EXPIRY_SCOPES``) past their deadline → expired, with their queued
    invocations, inside the caller's transaction; how many runs."""
    conn.execute(sql.expire_invocations(scope), (now, *params))
    return len(conn.execute(sql.expire_runs(scope), (now, now, *params)).fetchall())


def delete_session(conn: sqlite3.Connection, env: str, session_id: str, now: int) -> list[str] | None:
    """Delete an idle session, cancel its held runs and forget its registered agents; its agents (of
    its runs and registered), None when absent (one step of ``SqliteDatabase.delete_session``, which
    drops their state in the same transaction). Its runs queued past their deadline do not keep it:
    they expire first."""
    expire_overdue(conn, "session", now, (env, session_id))
    if conn.execute(sql.DELETE_IDLE_SESSION, (env, session_id, env, session_id)).rowcount == 0:
        if conn.execute(sql.GET_SESSION, (env, session_id)).fetchone() is None:
            return None
        raise SessionBusy(f"session {session_id!r} has a queued or running run")
    conn.execute(sql.CANCEL_HELD_OF_SESSION, (now, env, session_id))
    conn.execute(events_sql.DELETE_OF_SESSION, (env, session_id))
    agents = [row[0] for row in conn.execute(sql.SESSION_AGENTS, sql.of_session(env, session_id))]
    conn.execute(sql.DELETE_SESSION_AGENTS, (env, session_id))
    return agents


def fork_session(conn: sqlite3.Connection, source: StoredSession, fork: StoredSession) -> Forked | None:
    """The platform's part of a fork (a step of ``SqliteDatabase.fork_session``): the fork's row and the
    source's agents recorded in it; None when the source is gone."""
    row = conn.execute(sql.GET_SESSION, (source.env, source.id)).fetchone()
    if row is None or sql.session_from_row(row).made != source.made:
        return None
    stored, created = _insert_session(conn, fork)
    if not created:
        return Forked(stored, False, [])
    agents = [agent for (agent,) in conn.execute(sql.SESSION_AGENTS, sql.of_session(source.env, source.id))]
    conn.executemany(sql.INSERT_SESSION_AGENT, [(fork.env, fork.id, agent) for agent in agents])
    return Forked(stored, True, agents)
