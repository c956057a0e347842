"""SQL text of the platform facet, apart from the calls that run it (``sqlite/platform.py``, ``postgres/platform.py``).

Statements use ``?`` placeholders and standard SQL (``INSERT ... SELECT ... WHERE NOT EXISTS``,
``UPDATE ... RETURNING``), so a PostgreSQL repository can reuse them with ``%s``; only the DDL
is per dialect. Every guarded write is one statement whose ``WHERE`` carries the guard.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from ..records import DEFAULT_QUEUE_TIMEOUT_MS, FINAL, RunFilter, StoredInvocation, StoredKey, StoredRun, StoredSession
from . import events, remembered

FINISHED = f"status IN ({', '.join(repr(status) for status in FINAL)})"
"""The runs a purge may delete; the same text in the partial index and the statements, so SQLite uses it."""
BACKFILL_DEADLINES = f"""
    UPDATE ks_runs SET queue_deadline = updated_at + {DEFAULT_QUEUE_TIMEOUT_MS} WHERE status = 'queued';
    UPDATE ks_invocations SET queue_deadline =
        (SELECT r.queue_deadline FROM ks_runs r WHERE r.id = ks_invocations.run_id) WHERE status = 'queued';
"""
"""Runs queued before deadlines existed get the default one from their last change (both backends' step 2)."""

SESSION_AGENTS_TABLE = (
    "CREATE TABLE ks_session_agents (env TEXT NOT NULL, session_id TEXT NOT NULL, agent TEXT NOT NULL, "
    "PRIMARY KEY (env, session_id, agent));"
    "INSERT INTO ks_session_agents (env, session_id, agent) "
    "SELECT DISTINCT env, session_id, agent FROM ks_runs WHERE session_id IS NOT NULL;"
)
"""Step 3 on both backends (the same text: TEXT columns only). A row says that ``agent`` keeps
session-scope state in the session: registered (``register_session``) or recorded by ``start_run``
with the run, so a purge of the session's finished runs never hides an agent whose state the
session's delete must drop. The step fills it from the runs already there. The session's delete
drops that state and the rows."""

END_USERS_TABLE = (
    "CREATE TABLE ks_end_users (env TEXT NOT NULL, end_user TEXT NOT NULL, owner TEXT NOT NULL, "
    "PRIMARY KEY (env, end_user));"
    "INSERT INTO ks_end_users (env, end_user, owner) "
    "SELECT s.env, s.end_user, s.owner FROM ks_sessions s WHERE s.seq IN (SELECT min(f.seq) FROM ks_sessions f "
    "JOIN ks_keys k ON k.id = f.owner AND k.role = 'member' WHERE f.end_user IS NOT NULL GROUP BY f.env, f.end_user);"
)
"""Step 5 on both backends. A row says which member key acts for an end user of an environment: the
first to name it in a session (``BIND_USER``); another member's session for that user is refused. The
step fills it from the sessions already there, each user going to the member of its oldest session."""


RUN_STATUS_INDEXES = """
    CREATE INDEX ks_runs_status ON ks_runs (env, status, seq);
    CREATE INDEX ks_runs_owner_status ON ks_runs (env, owner, status, seq);
"""
"""Step 6 on both backends. The runs of one status newest first, an admin's and a member's: the console
counts the held runs waiting for the signed-in person on every page, and lists them; without these a
held run was found by walking every run of the environment (or of the member) from the newest."""

SESSION_PARENT = "ALTER TABLE ks_sessions ADD COLUMN parent TEXT;"
"""Step 7 on both backends: the id of the session a session was forked from (``fork_session``), NULL for
every session made before it and every one not forked."""

SQLITE_SCHEMA = [
    """
    CREATE TABLE ks_envs (name TEXT PRIMARY KEY, created_at INTEGER NOT NULL);
    CREATE TABLE ks_keys (
        id TEXT PRIMARY KEY, env TEXT NOT NULL, role TEXT NOT NULL, name TEXT,
        secret_hash TEXT NOT NULL UNIQUE, created_at INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE ks_sessions (
        seq INTEGER PRIMARY KEY, env TEXT NOT NULL, id TEXT NOT NULL, owner TEXT NOT NULL, end_user TEXT,
        metadata BLOB NOT NULL, created_at INTEGER NOT NULL, UNIQUE (env, id));
    CREATE INDEX ks_sessions_owner ON ks_sessions (env, owner, seq);
    CREATE TABLE ks_runs (
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, env TEXT NOT NULL, agent TEXT NOT NULL,
        owner TEXT NOT NULL, caller TEXT NOT NULL, session_id TEXT, end_user TEXT, parent_id TEXT,
        status TEXT NOT NULL, input BLOB NOT NULL, output BLOB NOT NULL, error BLOB NOT NULL,
        hold BLOB NOT NULL, decision BLOB NOT NULL, cancel_requested INTEGER NOT NULL DEFAULT 0,
        idempotency_key TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
    CREATE UNIQUE INDEX ks_runs_idem ON ks_runs (env, caller, idempotency_key);
    CREATE INDEX ks_runs_session ON ks_runs (env, session_id, status);
    CREATE INDEX ks_runs_owner ON ks_runs (env, owner, seq);
    CREATE TABLE ks_invocations (
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, env TEXT NOT NULL, run_id TEXT NOT NULL,
        agent TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL, token_hash TEXT UNIQUE,
        lease_until INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL);
    CREATE INDEX ks_invocations_queue ON ks_invocations (env, status, agent, seq);
    CREATE INDEX ks_invocations_lease ON ks_invocations (status, lease_until);
    """,
    # 2: queue deadlines (runs queued before it get the default 600 s from their last change), the
    # agents workers claim for, and the indexes of the expiry sweep, the purge and the agent counts.
    f"""
    ALTER TABLE ks_runs ADD COLUMN queue_timeout INTEGER NOT NULL DEFAULT {DEFAULT_QUEUE_TIMEOUT_MS};
    ALTER TABLE ks_runs ADD COLUMN queue_deadline INTEGER;
    ALTER TABLE ks_invocations ADD COLUMN queue_deadline INTEGER;
    {BACKFILL_DEADLINES}
    CREATE INDEX ks_runs_deadline ON ks_runs (queue_deadline) WHERE status = 'queued';
    CREATE INDEX ks_runs_finished ON ks_runs (updated_at) WHERE {FINISHED};
    CREATE INDEX ks_runs_agent ON ks_runs (env, agent, status);
    CREATE INDEX ks_invocations_run ON ks_invocations (run_id);
    CREATE TABLE ks_agents (
        env TEXT NOT NULL, agent TEXT NOT NULL, last_claim_at INTEGER NOT NULL, PRIMARY KEY (env, agent));
    """,
    # 3: the agents that keep state in a session without a run of it (an embedded store registered them)
    SESSION_AGENTS_TABLE,
    # 4: the key that claimed each invocation: revoking it ends the invocations it holds
    "ALTER TABLE ks_invocations ADD COLUMN claimed_by TEXT;",
    # 5: each end user's member key, the one that named it first
    END_USERS_TABLE,
    # 6: runs by status, newest first (held runs waiting for a person)
    RUN_STATUS_INDEXES,
    # 7: the session a fork was made from
    SESSION_PARENT,
    # 8: each run's log of events, the platform's written by triggers (sql/events.py)
    events.SQLITE_STEP,
    # 9: the answers of idempotent writes, kept with their writes (stores/remembered.py)
    remembered.SQLITE_STEP,
    # 10: an emit's events in one row (sql/event_rows.py)
    events.SQLITE_PACKED_STEP,
]

KEY_COLUMNS = "id, env, role, name, created_at, revoked"
SESSION_COLUMNS = "env, id, owner, end_user, metadata, created_at, seq, parent"
RUN_COLUMNS = (
    "env, id, agent, owner, session_id, end_user, parent_id, status, input, created_at, updated_at, "
    "output, error, hold, decision, cancel_requested, idempotency_key, seq, queue_timeout, queue_deadline"
)
INVOCATION_COLUMNS = (
    "id, env, run_id, agent, kind, status, created_at, lease_until, token_hash, seq, queue_deadline, claimed_by"
)

INSERT_ENV = "INSERT INTO ks_envs (name, created_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
INSERT_KEY = "INSERT INTO ks_keys (id, env, role, name, created_at, secret_hash) VALUES (?, ?, ?, ?, ?, ?)"
UPSERT_ADMIN_KEY = (
    INSERT_KEY + " ON CONFLICT (secret_hash) DO UPDATE SET env = excluded.env, role = 'admin', revoked = 0"
)
KEY_BY_HASH = f"SELECT {KEY_COLUMNS} FROM ks_keys WHERE secret_hash = ?"
LIST_KEYS = f"SELECT {KEY_COLUMNS} FROM ks_keys WHERE env = ? AND revoked = 0 ORDER BY created_at, id"
REVOKE_KEY = "UPDATE ks_keys SET revoked = 1 WHERE env = ? AND id = ? AND revoked = 0"
ANY_KEY = "SELECT 1 FROM ks_keys WHERE revoked = 0 LIMIT 1"
INSERT_FIRST_KEY = (
    "INSERT INTO ks_keys (id, env, role, name, created_at, secret_hash) SELECT ?, ?, ?, ?, ?, ? "
    "WHERE NOT EXISTS (SELECT 1 FROM ks_keys WHERE revoked = 0)"
)

INSERT_SESSION = (
    "INSERT INTO ks_sessions (env, id, owner, end_user, metadata, created_at, parent) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (env, id) DO NOTHING"
)


def session_params(s: StoredSession) -> tuple[Any, ...]:
    """The values of ``INSERT_SESSION``."""
    return s.env, s.id, s.owner, s.user, s.metadata, s.created_at, s.parent


GET_SESSION = f"SELECT {SESSION_COLUMNS} FROM ks_sessions WHERE env = ? AND id = ?"

SEQ_END = 2**63 - 1
"""Past every ``seq``: the cursor of a first page listed newest first."""


@cache
def paged(table: str, columns: str, tests: tuple[str, ...], desc: bool) -> str:
    """A listing by ``seq`` past a cursor: oldest first above it, or with ``desc`` newest first below it
    (the cursor's value is ``seq_bound``'s), with each of ``tests`` (``column = ?``). Its values: env,
    the cursor, one per test, the limit. Only the filters given are in the text, so the planner can use
    an index on them (a ``? IS NULL OR`` test hides the column from it)."""
    order, compare = (" DESC", "<") if desc else ("", ">")
    where = "".join(f" AND {test}" for test in tests)
    return f"SELECT {columns} FROM {table} WHERE env = ? AND seq {compare} ?{where} ORDER BY seq{order} LIMIT ?"


def seq_bound(after: int, desc: bool) -> int:
    """The cursor ``paged`` compares with: ``after`` itself, or ``SEQ_END`` for a first page newest first."""
    return after if after or not desc else SEQ_END


def list_sessions(
    env: str, owner: str | None, user: str | None, after: int, limit: int, desc: bool
) -> tuple[str, tuple[Any, ...]]:
    """The statement and values of a session listing."""
    given = {"owner": owner, "end_user": user}
    present = tuple(name for name, value in given.items() if value is not None)
    values = tuple(given[name] for name in present)
    tests = tuple(f"{name} = ?" for name in present)
    return paged("ks_sessions", SESSION_COLUMNS, tests, desc), (env, seq_bound(after, desc), *values, limit)


UPDATE_SESSION = (
    "UPDATE ks_sessions SET metadata = ? WHERE env = ? AND id = ? AND (? IS NULL OR owner = ?) "
    f"RETURNING {SESSION_COLUMNS}"
)
"""The owner is part of the guard: a session deleted and created again by someone else is not theirs."""
DELETE_IDLE_SESSION = (
    "DELETE FROM ks_sessions WHERE env = ? AND id = ? AND NOT EXISTS "
    "(SELECT 1 FROM ks_runs WHERE env = ? AND session_id = ? AND status IN ('queued', 'running'))"
)
SESSION_AGENTS = (
    "SELECT agent FROM ks_runs WHERE env = ? AND session_id = ? "
    "UNION SELECT agent FROM ks_session_agents WHERE env = ? AND session_id = ? ORDER BY agent"
)
"""The agents of a session's runs and the ones registered in it, each once; ``of_session``'s parameters.
(Since step 3 every run's agent is in ks_session_agents too; reading the runs as well costs one index read.)"""


def of_session(env: str, session_id: str) -> tuple[str, str, str, str]:
    """The parameters of ``SESSION_AGENTS``: the session once for its runs, once for its registered agents."""
    return env, session_id, env, session_id


BIND_USER = (
    "INSERT INTO ks_end_users (env, end_user, owner) VALUES (?, ?, ?) "
    "ON CONFLICT (env, end_user) DO UPDATE SET owner = ks_end_users.owner RETURNING owner"
)
"""The member key of an end user: the given one when it names the user first; else the one before it,
left as it was (one statement: two members naming a new user at once get the same answer)."""
INSERT_SESSION_AGENT = "INSERT INTO ks_session_agents (env, session_id, agent) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
DELETE_SESSION_AGENTS = "DELETE FROM ks_session_agents WHERE env = ? AND session_id = ?"
CANCEL_HELD_OF_SESSION = (
    "UPDATE ks_runs SET status = 'cancelled', updated_at = ? WHERE env = ? AND session_id = ? AND status = 'held'"
)
"""A deleted session takes its held runs with it: no resume may run in a session that is gone."""

SESSION_OF_RUN = "SELECT session_id FROM ks_runs WHERE env = ? AND id = ?"

RUN_BY_IDEMPOTENCY = f"SELECT {RUN_COLUMNS} FROM ks_runs WHERE env = ? AND caller = ? AND idempotency_key = ?"
_INSERT_RUN_HEAD = (
    "INSERT INTO ks_runs (id, env, agent, owner, caller, session_id, end_user, parent_id, status, input, "
    "output, error, hold, decision, idempotency_key, created_at, updated_at, queue_timeout, queue_deadline) "
)
_RUN_MARKS = ", ".join("?" * 19)
INSERT_RUN = _INSERT_RUN_HEAD + f"VALUES ({_RUN_MARKS})"
INSERT_RUN_IN_SESSION = (
    _INSERT_RUN_HEAD + f"SELECT {_RUN_MARKS} WHERE EXISTS (SELECT 1 FROM ks_sessions WHERE env = ? AND id = ?)"
)
"""A run of a session that waits its turn (``multitask`` enqueue, interrupt): only the session must exist."""
INSERT_SESSION_RUN = (
    INSERT_RUN_IN_SESSION
    + " AND NOT EXISTS (SELECT 1 FROM ks_runs WHERE env = ? AND session_id = ? AND status IN ('queued', 'running'))"
)
"""A run of a session that must find it idle (``multitask`` reject)."""


def session_run(run: StoredRun, caller: str, multitask: str) -> tuple[str, tuple[Any, ...]]:
    """The guarded insert of a run of a session and its values: no row when the session is gone, nor, for
    ``reject``, while a run of it is queued or running."""
    params = (*run_params(run, caller), run.env, run.session_id)
    if multitask == "reject":
        return INSERT_SESSION_RUN, (*params, run.env, run.session_id)
    return INSERT_RUN_IN_SESSION, params


_QUEUED_OF_SESSION = "SELECT id FROM ks_runs WHERE env = ? AND session_id = ? AND status = 'queued'"


def interrupt_session(env: str, session_id: str, now: int) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements (and values) of an interrupt, in the transaction of the turn that interrupts: the
    session's queued invocations and runs cancelled (invocations first, the order a claim locks them),
    a cancel requested of its running runs (their workers see it on their next heartbeat). Held runs are
    left as they are."""
    return [
        (
            "UPDATE ks_invocations SET status = 'cancelled' "
            f"WHERE status = 'queued' AND run_id IN ({_QUEUED_OF_SESSION})",
            (env, session_id),
        ),
        (
            "UPDATE ks_runs SET status = 'cancelled', updated_at = ? "
            "WHERE env = ? AND session_id = ? AND status = 'queued'",
            (now, env, session_id),
        ),
        (
            "UPDATE ks_runs SET cancel_requested = 1, updated_at = ? "
            "WHERE env = ? AND session_id = ? AND status = 'running'",
            (now, env, session_id),
        ),
    ]


GET_RUN = f"SELECT {RUN_COLUMNS} FROM ks_runs WHERE env = ? AND id = ?"
RUN_BY_ID = f"SELECT {RUN_COLUMNS} FROM ks_runs WHERE id = ?"
RUN_FILTERS = ("owner", "session_id", "status", "agent", "parent_id")
"""``RunFilter``'s fields a listing may filter on, each a column of ``ks_runs`` of the same name."""


def list_runs(q: RunFilter) -> tuple[str, tuple[Any, ...]]:
    """The statement and values of a run listing.

    A session's runs are few: they are found by the session's index, then sorted. A member's listing
    also tests the owner, and SQLite, without statistics, would rather walk the owner's index in
    ``seq`` order (every run of that member) to skip the sort; ``owner || ''`` keeps that index out of
    a session's listing (PostgreSQL plans by its statistics either way)."""
    present = tuple(name for name in RUN_FILTERS if getattr(q, name) is not None)
    values = tuple(getattr(q, name) for name in present)
    by_session = q.session_id is not None
    tests = tuple("owner || '' = ?" if name == "owner" and by_session else f"{name} = ?" for name in present)
    return paged("ks_runs", RUN_COLUMNS, tests, q.desc), (q.env, seq_bound(q.after, q.desc), *values, q.limit)


DECIDE = (
    f"UPDATE ks_runs SET status = 'queued', decision = ?, updated_at = ?, queue_deadline = ? "
    f"WHERE env = ? AND id = ? AND status = 'held' RETURNING {RUN_COLUMNS}"
)
CANCEL_WAITING = (
    f"UPDATE ks_runs SET status = 'cancelled', updated_at = ? "
    f"WHERE env = ? AND id = ? AND status IN ('queued', 'held') RETURNING {RUN_COLUMNS}"
)
CANCEL_QUEUED_INVOCATIONS = "UPDATE ks_invocations SET status = 'cancelled' WHERE run_id = ? AND status = 'queued'"
REQUEST_CANCEL = (
    f"UPDATE ks_runs SET cancel_requested = 1, updated_at = ? "
    f"WHERE env = ? AND id = ? AND status = 'running' RETURNING {RUN_COLUMNS}"
)

INSERT_INVOCATION = (
    "INSERT INTO ks_invocations (id, env, run_id, agent, kind, status, created_at, queue_deadline) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


TURN_FREE = (
    "(kind <> 'start' OR NOT EXISTS (SELECT 1 FROM ks_runs r "
    "JOIN ks_runs o ON o.env = r.env AND o.session_id = r.session_id AND o.status IN ('queued', 'running') "
    "JOIN ks_invocations j ON j.run_id = o.id AND j.status IN ('queued', 'running') "
    "WHERE r.id = ks_invocations.run_id AND j.seq < ks_invocations.seq))"
)
"""An invocation whose turn it is: a resume always; a start when no invocation of its session queued before
it is still queued or running. So a session's turns (``multitask`` enqueue) start one at a time, in the
order they were started, and a start waits for a resume queued before it; but a held run is not waited
for, and its resume, decided after a newer turn was started, may run beside that turn (as a resume
always could). A queued invocation past its deadline keeps its place until it is expired (the sweep, a
turn of the session, a read): judging the deadline here, by each claimer's own clock, could let a later
run start beside one claimed at that very millisecond. The session's other runs are found by
``ks_runs_session`` (env, session_id, status), their invocations by ``ks_invocations_run``."""


def queued_filter(agents: Sequence[str]) -> str:
    """Queued invocations of ``agents`` whose deadline has not passed and whose turn it is (``TURN_FREE``);
    parameters: env, the agents, now."""
    return (
        f"env = ? AND status = 'queued' AND agent IN ({', '.join('?' * len(agents))}) "
        f"AND (queue_deadline IS NULL OR queue_deadline >= ?) AND {TURN_FREE}"
    )


def has_queued(agents: Sequence[str]) -> str:
    return f"SELECT 1 FROM ks_invocations WHERE {queued_filter(agents)} LIMIT 1"


LIVE_KEY = "EXISTS (SELECT 1 FROM ks_keys WHERE id = ? AND revoked = 0)"
"""The claimer's key is not revoked: part of the claim's guard, so no token is handed out after a revocation."""


def claim(agents: Sequence[str]) -> str:
    """Take the oldest queued invocation for a key still live: the guard ``status = 'queued'`` makes it
    exclusive, the deadline in ``queued_filter`` means an invocation past it is never claimed (swept or
    not), and ``LIVE_KEY`` that a claim waiting while its key is revoked takes nothing. Its values: token
    hash, lease end, claimer, env, the agents, now, claimer."""
    return (
        "UPDATE ks_invocations SET status = 'running', token_hash = ?, lease_until = ?, claimed_by = ? "
        f"WHERE seq = (SELECT seq FROM ks_invocations WHERE {queued_filter(agents)} ORDER BY seq LIMIT 1) "
        f"AND status = 'queued' AND {LIVE_KEY} RETURNING {INVOCATION_COLUMNS}"
    )


START_RUN = (
    f"UPDATE ks_runs SET status = 'running', cancel_requested = 0, updated_at = ?, queue_deadline = NULL "
    f"WHERE id = ? AND status = 'queued' RETURNING {RUN_COLUMNS}"
)
TOKEN_CONTEXT = (
    "SELECT i.id, i.run_id, i.env, i.agent, r.session_id, r.end_user, r.owner, i.lease_until "
    "FROM ks_invocations i JOIN ks_runs r ON r.id = i.run_id WHERE i.token_hash = ? AND i.status = 'running'"
)
TOKEN_LEASE = "SELECT lease_until FROM ks_invocations WHERE token_hash = ? AND status = 'running'"
_LIVE = "id = ? AND token_hash = ? AND status = 'running' AND lease_until >= ?"
HEARTBEAT = f"UPDATE ks_invocations SET lease_until = ? WHERE {_LIVE} RETURNING run_id"
RUN_CANCEL_REQUESTED = "SELECT cancel_requested FROM ks_runs WHERE id = ?"
END_INVOCATION = f"UPDATE ks_invocations SET status = ? WHERE {_LIVE} RETURNING run_id"
FINISH_RUN = {
    "complete": "UPDATE ks_runs SET status = ?, output = ?, updated_at = ? WHERE id = ? AND status = 'running'",
    "fail": "UPDATE ks_runs SET status = ?, error = ?, updated_at = ? WHERE id = ? AND status = 'running'",
    "hold": "UPDATE ks_runs SET status = ?, hold = ?, updated_at = ?, decision = ? WHERE id = ? AND status = 'running'",
}
EXPIRE_INVOCATIONS = (
    "UPDATE ks_invocations SET status = 'lost' WHERE status = 'running' AND lease_until < ? RETURNING run_id"
)
INTERRUPT_RUN = "UPDATE ks_runs SET status = 'interrupted', updated_at = ? WHERE id = ? AND status = 'running'"
END_CLAIMS_OF = "UPDATE ks_invocations SET status = 'lost' WHERE status = 'running' AND claimed_by = ? RETURNING run_id"
"""A revoked key's running invocations: lost, as if their leases ran out (their runs are then interrupted)."""

# queue deadlines: queued runs past theirs become expired, invocations first (the order a claim locks them)
_OVERDUE = "status = 'queued' AND queue_deadline < ?"
EXPIRY_SCOPES = {"all": "", "session": " AND env = ? AND session_id = ?", "run": " AND id = ?"}
"""Which overdue runs one expiry step takes: every one (the sweep), a session's (a turn starts, the session
is deleted) or one run's (a cancel). Parameters after ``now``: none, (env, session_id), (run_id,)."""
ANY_OVERDUE = f"SELECT 1 FROM ks_runs WHERE {_OVERDUE} LIMIT 1"


def expire_invocations(scope: str) -> str:
    """The queued invocations of overdue runs; parameters: now, then the scope's."""
    return (
        "UPDATE ks_invocations SET status = 'expired' WHERE status = 'queued' AND run_id IN "
        f"(SELECT id FROM ks_runs WHERE {_OVERDUE}{EXPIRY_SCOPES[scope]})"
    )


def expire_runs(scope: str) -> str:
    """Overdue runs → expired, returning their ids; parameters: now (updated_at), now, then the scope's."""
    return f"UPDATE ks_runs SET status = 'expired', updated_at = ? WHERE {_OVERDUE}{EXPIRY_SCOPES[scope]} RETURNING id"


# agents
TOUCH_AGENT = (
    "INSERT INTO ks_agents (env, agent, last_claim_at) VALUES (?, ?, ?) ON CONFLICT (env, agent) "
    "DO UPDATE SET last_claim_at = excluded.last_claim_at WHERE excluded.last_claim_at > ks_agents.last_claim_at"
)


def agent_queries(env: str | None) -> tuple[tuple[str, str, str], tuple[str, ...]]:
    """The three reads of ``agent_stats`` (run counts, last claims, oldest queued) and their parameters."""
    where, params = ("WHERE env = ?", (env,)) if env is not None else ("", ())
    queued = "AND env = ?" if env is not None else ""
    return (
        f"SELECT env, agent, status, count(*) FROM ks_runs {where} GROUP BY env, agent, status",
        f"SELECT env, agent, last_claim_at FROM ks_agents {where}",
        f"SELECT env, agent, min(created_at) FROM ks_invocations WHERE status = 'queued' {queued} GROUP BY env, agent",
    ), params


# retention: finished runs older than a cutoff, a batch at a time, with their invocations
_PURGEABLE = f"{FINISHED} AND updated_at < ?"
PURGE_RUNS = f"""DELETE FROM ks_runs WHERE seq IN (
    SELECT seq FROM ks_runs WHERE {_PURGEABLE} ORDER BY updated_at LIMIT ?) RETURNING id"""
PURGE_INVOCATIONS = "DELETE FROM ks_invocations WHERE run_id = ?"
COUNT_PURGEABLE = f"SELECT count(*) FROM ks_runs WHERE {_PURGEABLE}"


def key_from_row(row: Sequence[Any]) -> StoredKey:
    return StoredKey(row[0], row[1], row[2], row[3], row[4], bool(row[5]))


def session_from_row(row: Sequence[Any]) -> StoredSession:
    return StoredSession(row[0], row[1], row[2], row[3], bytes(row[4]), row[5], row[6], row[7])


def run_from_row(row: Sequence[Any]) -> StoredRun:
    return StoredRun(
        env=row[0],
        id=row[1],
        agent=row[2],
        owner=row[3],
        session_id=row[4],
        user=row[5],
        parent_id=row[6],
        status=row[7],
        input=bytes(row[8]),
        created_at=row[9],
        updated_at=row[10],
        output=bytes(row[11]),
        error=bytes(row[12]),
        hold=bytes(row[13]),
        decision=bytes(row[14]),
        cancel_requested=bool(row[15]),
        idempotency_key=row[16],
        seq=row[17],
        queue_timeout=row[18],
        queue_deadline=row[19],
    )


def invocation_from_row(row: Sequence[Any]) -> StoredInvocation:
    return StoredInvocation(*row[:12])


def run_params(run: StoredRun, caller: str) -> tuple[Any, ...]:
    """The values of ``INSERT_RUN`` / the first 19 of ``INSERT_SESSION_RUN``."""
    return (
        run.id,
        run.env,
        run.agent,
        run.owner,
        caller,
        run.session_id,
        run.user,
        run.parent_id,
        run.status,
        run.input,
        run.output,
        run.error,
        run.hold,
        run.decision,
        run.idempotency_key,
        run.created_at,
        run.updated_at,
        run.queue_timeout,
        run.queue_deadline,
    )


def invocation_params(inv: StoredInvocation) -> tuple[Any, ...]:
    return (inv.id, inv.env, inv.run_id, inv.agent, inv.kind, inv.status, inv.created_at, inv.queue_deadline)
