"""SQL text of the run event logs (``RunEventLog``), apart from the calls that run it (``sqlite/events.py``,
``postgres/events.py``). Schema steps 8 and 10 of the platform, on both backends.

Two tables: ``ks_run_events`` (since step 10 a row per emit, keyed by run and its last ``seq``: see
``event_rows.py``; the platform's events a row each) and ``ks_event_heads`` (per
run, the last ``seq`` given: a small row of its own, so counting never rewrites a run's row, which may
hold a MiB of input). The platform's own events are written by triggers on ``ks_runs``, in the statement
that changes a status, whichever statement that is (a claim, a finish, a sweep, a cancel, a session's
delete); on PostgreSQL the head's row lock orders them with the workers' emits, so two writers never
take one ``seq`` and events commit in ``seq`` order. A run arriving without a head (a new run, or one
imported from a dump made before run events) gets the events of its status; one whose head came
first (imported with its events) gets none. A run's delete (a purge) takes its events and head.

Runs made before step 8 get, as the step runs, the events their present status would have written:
a ``run.status`` (after a ``run.output`` when done), stamped with their last change. So every run has
a log, and a stream of an old finished run ends at once.
"""

from __future__ import annotations

DIALECTS = {
    "sqlite": {
        "status": "CAST('{\"status\":\"' || @.status || '\"}' AS BLOB)",
        "output": "CAST('{\"output\":' || @.output || '}' AS BLOB)",
        "done": "(@.status = 'done')",
    },
    "postgres": {
        "status": "convert_to('{\"status\":\"' || @.status || '\"}', 'UTF8')",
        "output": "convert_to('{\"output\":', 'UTF8') || @.output || convert_to('}', 'UTF8')",
        "done": "(@.status = 'done')::int",
    },
}
"""What differs between the two: bytes from text, a boolean as a number. ``@`` stands for the row."""


def of(dialect: str, name: str, row: str) -> str:
    """The expression ``name`` of ``dialect`` over the row ``row`` (``NEW``, a table)."""
    return DIALECTS[dialect][name].replace("@", row)


def _backfill(dialect: str) -> str:
    """Every run already there gets the events of its present status, and its head."""
    d = {name: of(dialect, name, "ks_runs") for name in DIALECTS[dialect]}
    return f"""
    INSERT INTO ks_event_heads (run_id, last_seq) SELECT id, 1 + {d["done"]} FROM ks_runs;
    INSERT INTO ks_run_events (run_id, seq, type, data, at)
        SELECT id, 1, 'run.output', {d["output"]}, updated_at FROM ks_runs WHERE status = 'done';
    INSERT INTO ks_run_events (run_id, seq, type, data, at)
        SELECT id, 1 + {d["done"]}, 'run.status', {d["status"]}, updated_at FROM ks_runs;
    """


SQLITE_TABLES = """
    CREATE TABLE ks_event_heads (run_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL);
    CREATE TABLE ks_run_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
        data BLOB NOT NULL, at INTEGER NOT NULL, UNIQUE (run_id, seq));
"""
"""``id`` is SQLite's alone: the file's change cursor for servers that share it (``sqlite/events.py``),
never reused (AUTOINCREMENT), never in a dump."""

_SQLITE_EVENTS = """
    INSERT INTO ks_event_heads (run_id, last_seq) VALUES (NEW.id, 1 + (NEW.status = 'done'))
        ON CONFLICT (run_id) DO UPDATE SET last_seq = last_seq + excluded.last_seq;
    INSERT INTO ks_run_events (run_id, seq, type, data, at)
        SELECT NEW.id, last_seq - 1, 'run.output', {output}, NEW.updated_at
        FROM ks_event_heads WHERE run_id = NEW.id AND NEW.status = 'done';
    INSERT INTO ks_run_events (run_id, seq, type, data, at)
        SELECT NEW.id, last_seq, 'run.status', {status}, NEW.updated_at FROM ks_event_heads WHERE run_id = NEW.id;
"""

SQLITE_TRIGGERS = f"""
    CREATE TRIGGER ks_runs_events_insert AFTER INSERT ON ks_runs
    WHEN NOT EXISTS (SELECT 1 FROM ks_event_heads WHERE run_id = NEW.id)
    BEGIN {_SQLITE_EVENTS} END;
    CREATE TRIGGER ks_runs_events_status AFTER UPDATE OF status ON ks_runs WHEN NEW.status IS NOT OLD.status
    BEGIN {_SQLITE_EVENTS} END;
    CREATE TRIGGER ks_runs_events_delete AFTER DELETE ON ks_runs BEGIN
        DELETE FROM ks_run_events WHERE run_id = OLD.id;
        DELETE FROM ks_event_heads WHERE run_id = OLD.id;
    END;
""".replace("{output}", of("sqlite", "output", "NEW")).replace("{status}", of("sqlite", "status", "NEW"))

SQLITE_STEP = SQLITE_TABLES + _backfill("sqlite") + SQLITE_TRIGGERS
"""Step 8 on SQLite."""

NOTIFY_CHANNEL = "keepstate_run_events"
"""The PostgreSQL channel of new events: its payload is ``RUN_ID SCHEMA`` (several stores may share one
database, each in its schema; a server listens to its own)."""

LIVE_INVOCATION_RUN = (
    "SELECT r.id, r.cancel_requested FROM ks_invocations i JOIN ks_runs r ON r.id = i.run_id "
    "WHERE i.id = ? AND i.token_hash = ? AND i.status = 'running' AND i.lease_until >= ? AND r.status = 'running'"
)
"""The run of a live invocation (held by the token, running, its lease not over at ``now``), still running."""


def _named(statement: str, *names: str) -> str:
    """``statement`` with its ``?`` placeholders, in order, replaced by ``names`` (a PL/pgSQL function's
    arguments), so the function runs the same text as the SQLite path."""
    for name in names:
        statement = statement.replace("?", name, 1)
    assert "?" not in statement
    return statement


PG_EMIT = """
    CREATE FUNCTION ks_emit(invocation TEXT, token TEXT, now_ms BIGINT, cap BIGINT, kinds TEXT[], items BYTEA[])
        RETURNS TABLE (outcome TEXT, last BIGINT, cancel BOOLEAN) LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        run TEXT;
        head BIGINT;
        live_run TEXT;
        asked BOOLEAN;
        adding INTEGER := cardinality(items);
    BEGIN
        SELECT h.run_id, h.last_seq INTO run, head FROM ks_event_heads h
            JOIN ks_invocations i ON i.run_id = h.run_id WHERE i.id = invocation AND i.token_hash = token
            FOR UPDATE OF h;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'gone', NULL::BIGINT, NULL::BOOLEAN;
            RETURN;
        END IF;
        IF head + adding > cap THEN
            RETURN QUERY SELECT 'full', head, NULL::BOOLEAN;
            RETURN;
        END IF;
        {LIVE} INTO live_run, asked;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'gone', NULL::BIGINT, NULL::BOOLEAN;
            RETURN;
        END IF;
        UPDATE ks_event_heads SET last_seq = head + adding WHERE run_id = run;
        INSERT INTO ks_run_events (run_id, seq, type, data, at)
            SELECT run, head + e.n, e.kind, e.item, now_ms
            FROM unnest(kinds, items) WITH ORDINALITY AS e(kind, item, n);
        RETURN QUERY SELECT 'ok', head + adding, asked;
    END $$;
""".replace("{LIVE}", _named(LIVE_INVOCATION_RUN, "invocation", "token", "now_ms"))
"""A worker's emit on PostgreSQL, one round trip: the run's head locked first (the lock a status change's
trigger takes too), then, in a statement of its own (a VOLATILE function's statements each take a fresh
snapshot under READ COMMITTED), the invocation judged live; only then the head moved and the events written.
``outcome``: ``ok`` (``last``, ``cancel``), ``full`` (``last``: the events the log holds; nothing written)
or ``gone`` (not the token's live invocation; nothing written)."""

PG_STEP = (
    """
    CREATE TABLE ks_event_heads (run_id TEXT PRIMARY KEY, last_seq BIGINT NOT NULL);
    CREATE TABLE ks_run_events (
        run_id TEXT NOT NULL, seq BIGINT NOT NULL, type TEXT NOT NULL, data BYTEA NOT NULL, at BIGINT NOT NULL,
        PRIMARY KEY (run_id, seq));
    """
    + _backfill("postgres")
    + f"""
    CREATE FUNCTION ks_runs_status_events() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        added INTEGER := 1 + (NEW.status = 'done')::int;
        top BIGINT;
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO ks_event_heads (run_id, last_seq) VALUES (NEW.id, added)
                ON CONFLICT (run_id) DO NOTHING RETURNING last_seq INTO top;
        ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
            INSERT INTO ks_event_heads (run_id, last_seq) VALUES (NEW.id, added) ON CONFLICT (run_id)
                DO UPDATE SET last_seq = ks_event_heads.last_seq + added RETURNING last_seq INTO top;
        END IF;
        IF top IS NULL THEN
            RETURN NULL;
        END IF;
        IF NEW.status = 'done' THEN
            INSERT INTO ks_run_events (run_id, seq, type, data, at)
                VALUES (NEW.id, top - 1, 'run.output', {of("postgres", "output", "NEW")}, NEW.updated_at);
        END IF;
        INSERT INTO ks_run_events (run_id, seq, type, data, at)
            VALUES (NEW.id, top, 'run.status', {of("postgres", "status", "NEW")}, NEW.updated_at);
        RETURN NULL;
    END $$;
    CREATE TRIGGER ks_runs_status_events AFTER INSERT OR UPDATE OF status ON ks_runs
        FOR EACH ROW EXECUTE FUNCTION ks_runs_status_events();
    CREATE FUNCTION ks_runs_events_gone() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM ks_run_events WHERE run_id IN (SELECT id FROM gone);
        DELETE FROM ks_event_heads WHERE run_id IN (SELECT id FROM gone);
        RETURN NULL;
    END $$;
    CREATE TRIGGER ks_runs_events_gone AFTER DELETE ON ks_runs REFERENCING OLD TABLE AS gone
        FOR EACH STATEMENT EXECUTE FUNCTION ks_runs_events_gone();
    CREATE FUNCTION ks_run_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('{NOTIFY_CHANNEL}', run_id || ' ' || TG_TABLE_SCHEMA)
            FROM (SELECT DISTINCT run_id FROM added) runs;
        RETURN NULL;
    END $$;
    CREATE TRIGGER ks_run_events_notify AFTER INSERT ON ks_run_events REFERENCING NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION ks_run_events_notify();
    """
    + PG_EMIT
)
"""Step 8 on PostgreSQL. The status trigger runs after the row's update, which holds the run's row lock;
the head's upsert takes the head's, which an emit takes first (``postgres/events.py``). The notification
is sent when the transaction commits, and only then: a listener that wakes reads what it was told of."""


def _packing_emit() -> str:
    """Step 8's ``ks_emit`` writing an emit's events as one row (``event_rows``): its arguments and its
    insert replaced, each of them there once, so that what it checks and locks stays the same text."""
    function = PG_EMIT
    for old, new in (
        ("kinds TEXT[], items BYTEA[]", "adding INTEGER, kind TEXT, kinds TEXT, sizes TEXT, items BYTEA"),
        ("        adding INTEGER := cardinality(items);\n", ""),
        (
            """INSERT INTO ks_run_events (run_id, seq, type, data, at)
            SELECT run, head + e.n, e.kind, e.item, now_ms
            FROM unnest(kinds, items) WITH ORDINALITY AS e(kind, item, n);""",
            """INSERT INTO ks_run_events (run_id, seq, type, data, at, sizes, types)
            VALUES (run, head + adding, kind, items, now_ms, sizes, kinds);""",
        ),
    ):
        assert function.count(old) == 1, old
        function = function.replace(old, new)
    return function


_PACKED_COLUMNS = """
    ALTER TABLE ks_run_events ADD COLUMN sizes TEXT;
    ALTER TABLE ks_run_events ADD COLUMN types TEXT;
"""
SQLITE_PACKED_STEP = _PACKED_COLUMNS
PG_PACKED_STEP = (
    _PACKED_COLUMNS + "    DROP FUNCTION ks_emit(TEXT, TEXT, BIGINT, BIGINT, TEXT[], BYTEA[]);\n" + _packing_emit()
)
"""Step 10: a row may hold several events of one emit (``event_rows``: ``seq`` the last one's, ``sizes``
and ``types`` how to cut them apart); the rows written before, each one event, read as they did (both
columns NULL), as do the platform's own, which the triggers go on writing a row each. On PostgreSQL
``ks_emit`` takes the packed row."""

READ = "SELECT seq, type, data, at, sizes, types FROM ks_run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
"""The rows holding events after ``after``: ``limit`` rows hold at least ``limit`` events (``event_rows.unpacked``
cuts them)."""
INSERT_EVENTS = "INSERT INTO ks_run_events (run_id, seq, type, data, at, sizes, types) VALUES (?, ?, ?, ?, ?, ?, ?)"
LAST_SEQ = "SELECT last_seq FROM ks_event_heads WHERE run_id = ?"
ADD_SEQ = "UPDATE ks_event_heads SET last_seq = last_seq + ? WHERE run_id = ? RETURNING last_seq"


DELETE_OF_SESSION = (
    "DELETE FROM ks_run_events WHERE run_id IN (SELECT id FROM ks_runs WHERE env = ? AND session_id = ?)"
)
"""A deleted session's runs lose their events (their heads stay with them: a ``seq`` is never used twice)."""

_HEAD_PAST = (
    "INSERT INTO ks_event_heads (run_id, last_seq) SELECT run_id, max(seq) FROM ks_run_events WHERE run_id = ? "
    "GROUP BY run_id ON CONFLICT (run_id) DO UPDATE SET last_seq = {larger}(ks_event_heads.last_seq, excluded.last_seq)"
)
HEAD_PAST_EVENTS = {"sqlite": _HEAD_PAST.format(larger="max"), "postgres": _HEAD_PAST.format(larger="GREATEST")}
"""After an import wrote a run's events: its head at least at their last ``seq`` (a dump of a live store may
hold events newer than the head it read), so the next emit never takes a ``seq`` that is there."""
