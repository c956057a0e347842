"""PostgreSQL text of the platform facet: only what differs from ``sql/platform.py``.

The statements are ``sql/platform.py``'s, read through ``pg()``, which turns their ``?`` placeholders into
psycopg's ``%s`` (and types the ``? IS NULL`` filters, which PostgreSQL cannot infer). What lives
here is what READ COMMITTED needs on top: a ``NOT EXISTS`` guard in one statement does not see a
row that a concurrent transaction is inserting, and a re-checked ``UPDATE`` does not re-run its
sub-queries. So the few guards that look at *other* rows first take a row lock, and the next
statement (a fresh snapshot under READ COMMITTED) then decides:

- a turn locks its session row (``LOCK_SESSION``) before the "no active run" guard; a session
  delete does the same, so the two serialise. A partial unique index on active runs would not do:
  a held run's resume must be queued even while a newer turn is active.
- a claim picks the oldest queued invocation ``FOR UPDATE SKIP LOCKED``, so concurrent claimers
  take different invocations instead of queueing behind one row and coming back empty; it first holds
  its key's row ``FOR SHARE`` (``LOCK_LIVE_KEY``), which a revocation's update waits for, so the
  revocation's next statement sees the claim and ends it — or the claim, waiting, finds the key revoked.
  Its turn guard (``sql.TURN_FREE``: no invocation of the session queued before it still queued or
  running) needs no lock: an invocation leaves ``queued`` only by a commit that makes it running or
  final, so a claim whose snapshot predates that commit still sees it queued and passes over the later
  start, and one after sees it running; two claims never both start turns of one session;
- a turn that interrupts (``sql.interrupt_session``) holds its session row, then cancels the queued
  invocations before the runs, the order a claim takes them: a claim that got there first has its run
  running by the next statement, which requests its cancel instead;
- a cancel locks the run's queued invocations before the run, the order a claim takes them, so
  the two never deadlock;
- lease expiry is one statement (invocations lost, their runs interrupted) that skips rows another
  sweeper holds: every server sweeps, each lost invocation is handled once. The queue-deadline sweep
  (``EXPIRE_QUEUED``) and the purge (``PURGE``) are built the same way: one statement each, skipping
  rows another server or a claim holds, invocations locked before runs as a claim locks them.

Canonical JSON stays ``BYTEA`` (never ``jsonb``); flags stay integers so ``sql/platform.py``'s ``= 1`` holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from ..dump import order_by
from ..records import DEFAULT_QUEUE_TIMEOUT_MS
from ..sql import events, remembered
from ..sql import platform as sql

STEPS = (
    """
    CREATE TABLE ks_envs (name TEXT PRIMARY KEY, created_at BIGINT NOT NULL);
    CREATE TABLE ks_keys (
        id TEXT PRIMARY KEY, env TEXT NOT NULL, role TEXT NOT NULL, name TEXT,
        secret_hash TEXT NOT NULL UNIQUE, created_at BIGINT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE ks_sessions (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, env TEXT NOT NULL, id TEXT NOT NULL,
        owner TEXT NOT NULL, end_user TEXT, metadata BYTEA NOT NULL, created_at BIGINT NOT NULL, UNIQUE (env, id));
    CREATE INDEX ks_sessions_owner ON ks_sessions (env, owner, seq);
    CREATE TABLE ks_runs (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id TEXT NOT NULL UNIQUE, env TEXT NOT NULL,
        agent TEXT NOT NULL, owner TEXT NOT NULL, caller TEXT NOT NULL, session_id TEXT, end_user TEXT,
        parent_id TEXT, status TEXT NOT NULL, input BYTEA NOT NULL, output BYTEA NOT NULL, error BYTEA NOT NULL,
        hold BYTEA NOT NULL, decision BYTEA NOT NULL, cancel_requested INTEGER NOT NULL DEFAULT 0,
        idempotency_key TEXT, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL);
    CREATE UNIQUE INDEX ks_runs_idem ON ks_runs (env, caller, idempotency_key) WHERE idempotency_key IS NOT NULL;
    CREATE INDEX ks_runs_session ON ks_runs (env, session_id, status) WHERE session_id IS NOT NULL;
    CREATE INDEX ks_runs_owner ON ks_runs (env, owner, seq);
    CREATE TABLE ks_invocations (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id TEXT NOT NULL UNIQUE, env TEXT NOT NULL,
        run_id TEXT NOT NULL, agent TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL, token_hash TEXT UNIQUE,
        lease_until BIGINT NOT NULL DEFAULT 0, created_at BIGINT NOT NULL);
    CREATE INDEX ks_invocations_queue ON ks_invocations (env, agent, seq) WHERE status = 'queued';
    CREATE INDEX ks_invocations_lease ON ks_invocations (lease_until) WHERE status = 'running';
    CREATE INDEX ks_invocations_run ON ks_invocations (run_id);
    """,
    # 2: queue deadlines, the agents workers claim for, the indexes of the expiry sweep, the purge and the
    # agent counts (partial where a sweep reads only a few rows of a large table)
    f"""
    ALTER TABLE ks_runs ADD COLUMN queue_timeout BIGINT NOT NULL DEFAULT {DEFAULT_QUEUE_TIMEOUT_MS};
    ALTER TABLE ks_runs ADD COLUMN queue_deadline BIGINT;
    ALTER TABLE ks_invocations ADD COLUMN queue_deadline BIGINT;
    {sql.BACKFILL_DEADLINES}
    CREATE INDEX ks_runs_finished ON ks_runs (updated_at) WHERE {sql.FINISHED};
    CREATE INDEX ks_runs_agent ON ks_runs (env, agent, status);
    CREATE INDEX ks_runs_deadline ON ks_runs (queue_deadline) WHERE status = 'queued';
    CREATE INDEX ks_invocations_deadline ON ks_invocations (queue_deadline) WHERE status = 'queued';
    CREATE TABLE ks_agents (
        env TEXT NOT NULL, agent TEXT NOT NULL, last_claim_at BIGINT NOT NULL, PRIMARY KEY (env, agent));
    """,
    # 3: the agents that keep state in a session without a run of it (an embedded store registered them)
    sql.SESSION_AGENTS_TABLE,
    # 4: the key that claimed each invocation: revoking it ends the invocations it holds
    sql.SQLITE_SCHEMA[3],
    # 5: each end user's member key, the one that named it first
    sql.END_USERS_TABLE,
    # 6: runs by status, newest first (held runs waiting for a person)
    sql.RUN_STATUS_INDEXES,
    # 7: the session a fork was made from
    sql.SESSION_PARENT,
    # 8: each run's log of events, the platform's written by triggers (sql/events.py)
    events.PG_STEP,
    # 9: the answers of idempotent writes, kept with their writes (stores/remembered.py)
    remembered.PG_STEP,
    # 10: an emit's events in one row (sql/event_rows.py), ks_emit writing it
    events.PG_PACKED_STEP,
)

IDEMPOTENCY_INDEX = "ks_runs_idem"


@cache
def pg(statement: str) -> str:
    """``sql.py``'s text for psycopg: ``?`` → ``%s``, a literal ``%`` escaped, NULL filters typed."""
    return statement.replace("%", "%%").replace("(? IS NULL", "(%s::text IS NULL").replace("?", "%s")


LOCK_SESSION = pg(sql.GET_SESSION) + " FOR UPDATE"
LOCK_LIVE_KEY = (
    "SELECT set_config('plan_cache_mode', 'force_generic_plan', true) FROM ks_keys "
    "WHERE id = %s AND revoked = 0 FOR SHARE"
)
"""The claimer's key row held ``FOR SHARE``; and, for the rest of the claim's transaction, generic plans.
psycopg prepares a statement after its fifth run, and PostgreSQL then plans it anew on every run as
long as it judges its custom plans cheaper than the generic one: with the claim's turn guard
(``sql.TURN_FREE``, a correlated subquery over three tables) it always did, and planning took 0.3-0.5
ms of a claim's 0.1 ms statement. The generic plan is the one a claim used before the guard (the queue's
index in ``seq`` order, the guard's subquery on ``ks_runs_session`` and ``ks_invocations_run``):
measured 0.16 ms a claim against 0.76 ms replanned (0.14 ms without the guard). ``is_local``: it ends
with the transaction."""
LOCK_QUEUED_INVOCATIONS = "SELECT 1 FROM ks_invocations WHERE run_id = %s AND status = 'queued' FOR UPDATE"
LOCK_CANCEL_REQUESTED = pg(sql.RUN_CANCEL_REQUESTED) + " FOR UPDATE"
INSERT_SESSION = pg(sql.INSERT_SESSION) + f" RETURNING {sql.SESSION_COLUMNS}"


@cache
def returning_run(statement: str) -> str:
    """An insert of ``sql/platform.py`` (``INSERT_RUN``, ``session_run``'s) returning the run it made."""
    return pg(statement) + f" RETURNING {sql.RUN_COLUMNS}"


FINISH_RUN = {kind: pg(text) + f" RETURNING {sql.RUN_COLUMNS}" for kind, text in sql.FINISH_RUN.items()}


def _sweep(invocations: tuple[str, str], due: str, runs: tuple[str, str]) -> str:
    """One sweep statement: invocations in ``invocations[0]`` whose ``due`` column is before ``now``
    move to ``invocations[1]``, skipping rows another sweeper (or a claim) holds, and their runs from
    ``runs[0]`` to ``runs[1]``; it returns how many invocations it moved."""
    return f"""WITH ended AS (
    UPDATE ks_invocations SET status = '{invocations[1]}'
    WHERE seq IN (SELECT seq FROM ks_invocations WHERE status = '{invocations[0]}' AND {due} < %(now)s
                  FOR UPDATE SKIP LOCKED)
    RETURNING run_id
), moved AS (
    UPDATE ks_runs SET status = '{runs[1]}', updated_at = %(now)s
    WHERE id IN (SELECT run_id FROM ended) AND status = '{runs[0]}'
)
SELECT count(*) FROM ended"""


EXPIRE = _sweep(("running", "lost"), "lease_until", ("running", "interrupted"))
EXPIRE_QUEUED = _sweep(("queued", "expired"), "queue_deadline", ("queued", "expired"))
"""A queued run has exactly one queued invocation, with its deadline: each one moved is one run expired."""


PURGE = f"""WITH batch AS (
    SELECT seq, id FROM ks_runs WHERE {sql.FINISHED} AND updated_at < %(before)s
    ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), invocations AS (
    DELETE FROM ks_invocations WHERE run_id IN (SELECT id FROM batch)
), runs AS (
    DELETE FROM ks_runs WHERE seq IN (SELECT seq FROM batch) RETURNING 1
)
SELECT count(*) FROM runs"""
"""A finished run never changes again, so nothing but another purger holds its row: SKIP LOCKED lets
several purging servers take different batches instead of waiting on one another."""


NUMBERED = ("ks_sessions", "ks_runs", "ks_invocations")
"""Tables whose ``seq`` is an identity column: an import keeps exported numbers, then moves it past them."""


BYTE_ORDER = ' COLLATE "C"'
"""Text compared byte by byte, as SQLite does, whatever the database's own collation."""


def dump(table: str) -> str:
    """Every row of a table ``dump.check_table`` accepted (never a name from input unchecked)."""
    return f"SELECT * FROM {table} ORDER BY {order_by(table, BYTE_ORDER)}"


def load(table: str, columns: Sequence[str]) -> str:
    overriding = " OVERRIDING SYSTEM VALUE" if "seq" in columns else ""
    marks = ", ".join(["%s"] * len(columns))
    return f"INSERT INTO {table} ({', '.join(columns)}){overriding} VALUES ({marks}) ON CONFLICT DO NOTHING"


def renumber(table: str) -> str:
    """The next ``seq`` past every row, never backwards (a server may be inserting meanwhile)."""
    return (
        f"SELECT setval(s, GREATEST((SELECT COALESCE(max(seq), 0) FROM {table}) + 1, nextval(s)), false) "
        f"FROM pg_get_serial_sequence('{table}', 'seq') AS s"
    )


@cache
def _claim(count: int) -> str:
    return (
        "UPDATE ks_invocations SET status = 'running', token_hash = %s, lease_until = %s, claimed_by = %s WHERE seq = ("
        f"SELECT seq FROM ks_invocations WHERE {pg(sql.queued_filter(['?'] * count))} "
        f"ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) AND status = 'queued' RETURNING {sql.INVOCATION_COLUMNS}"
    )


def claim(agents: Sequence[str]) -> str:
    """Take the oldest queued invocation of ``agents`` that no concurrent claim holds."""
    return _claim(len(agents))


def has_queued(agents: Sequence[str]) -> str:
    return pg(sql.has_queued(agents))
