"""Harness store: each operation against the raw driver doing the same write, in one run.

SQLite (a file, WAL, ``synchronous=FULL``: one fsync per commit on both sides) and, when it is
reachable, PostgreSQL (a fresh schema, dropped afterwards). The raw baseline runs the bare
statement the store's operation boils down to, on the same database, with the same durability.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import count
from urllib.parse import quote

from keepstate.harness import Done, HarnessStore, LogAppend, open_harness_store

SECONDS = 0.8
ROUNDS = 2
PG_URL = os.environ.get("KEEPSTATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
ENTRY = {"role": "assistant", "content": "a short reply of a few dozen bytes, like most log entries"}
PREFILLED = 15_000
"""Queued operations waiting for ``start`` and ``settle``: more than either gets through in ``SECONDS``."""
Row = tuple[str, str, float, float]


def rate(fn: Callable[[], object], seconds: float = SECONDS) -> float:
    """Calls of ``fn()`` per second over about ``seconds``."""
    start, n = time.perf_counter(), 0
    while (elapsed := time.perf_counter() - start) < seconds or n < 20:
        fn()
        n += 1
    return n / elapsed


def best_of(ours: Callable[[], object], raw: Callable[[], object]) -> tuple[float, float]:
    """Alternate the two, ``ROUNDS`` times each, and keep each one's best: the machine is shared."""
    rounds = [(rate(ours), rate(raw)) for _ in range(ROUNDS)]
    return max(r[0] for r in rounds), max(r[1] for r in rounds)


def numbered(fn: Callable[[int], object]) -> Callable[[], object]:
    """``fn`` called with 0, 1, 2, … across every round, so no call repeats an earlier one."""
    counter = count()
    return lambda: fn(next(counter))


def measure(store: HarnessStore, raws: dict[str, Callable[[int], object]], backend: str) -> list[Row]:
    """The store's operations against the raw statement of each (``raws``, by operation name)."""
    store.append("s", "page", [LogAppend(ENTRY) for _ in range(100)])
    with store.transaction():  # operations for start and settle to consume
        for n in range(PREFILLED):
            store.enqueue(session="pre", id=str(n), input=None)
    cases: dict[str, Callable[[int], object]] = {
        "enqueue (new)": lambda i: store.enqueue(session="s", id=f"e{i}", input=ENTRY),
        "start": lambda i: store.start("pre", str(i)),
        "settle": lambda i: store.settle("pre", str(i), Done(result=ENTRY)),
        "append 1 entry": lambda i: store.append("s", "log", [LogAppend(ENTRY)]),
        "read 100 entries": lambda i: store.read("s", "page", limit=100),
    }
    return [(backend, name, *best_of(numbered(fn), numbered(raws[name]))) for name, fn in cases.items()]


def sqlite_rows(directory: str) -> list[Row]:
    from keepstate.stores.sqlite_db import connect, write_transaction

    path = os.path.join(directory, "bench.db")
    conn = connect(path)
    conn.executescript(
        "CREATE TABLE ops (seq INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT, id TEXT, status TEXT, input TEXT,"
        " result TEXT, UNIQUE (session, id));"
        "CREATE TABLE log (session TEXT, log TEXT, seq INTEGER, part INTEGER, data BLOB,"
        " PRIMARY KEY (session, log, seq, part));"
    )
    prefilled = [(str(n),) for n in range(PREFILLED)]
    conn.executemany("INSERT INTO ops (session, id, status) VALUES ('pre', ?, 'queued')", prefilled)
    conn.executemany("INSERT INTO log VALUES ('s', 'page', ?, 0, ?)", [(n, b"x" * 80) for n in range(1, 101)])

    def write(sql: str, *params: object) -> None:
        with write_transaction(conn):
            conn.execute(sql, params)

    raws: dict[str, Callable[[int], object]] = {
        "enqueue (new)": lambda i: write("INSERT INTO ops (session, id, status, input) VALUES ('s', ?, 'queued', ?)",
                                         f"r{i}", "{}"),
        "start": lambda i: write("UPDATE ops SET status = 'running' WHERE session = 'pre' AND id = ?", str(i)),
        "settle": lambda i: write("UPDATE ops SET status = 'done', result = '{}' WHERE session = 'pre' AND id = ?",
                                  str(i)),
        "append 1 entry": lambda i: write("INSERT INTO log VALUES ('s', 'log', ?, 0, ?)", i, b"x" * 80),
        "read 100 entries": lambda i: conn.execute(
            "SELECT seq, data FROM log WHERE session = 's' AND log = 'page' ORDER BY seq LIMIT 100").fetchall(),
    }
    with open_harness_store(f"sqlite:///{path}") as store:
        rows = measure(store, raws, "SQLite")
    conn.close()
    return rows


@contextmanager
def pg_schema() -> Iterator[str | None]:
    try:
        import psycopg

        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=2)
    except Exception:
        yield None
        return
    schema = f"bench_harness_{uuid.uuid4().hex[:8]}"
    admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{PG_URL}{'&' if '?' in PG_URL else '?'}options=" + quote(f"-csearch_path={schema}")
    finally:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()


def postgres_rows() -> list[Row]:
    import psycopg

    with pg_schema() as url:
        if url is None:
            return []
        conn = psycopg.connect(url, autocommit=True)
        conn.execute(
            "CREATE TABLE ops (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session TEXT, id TEXT,"
            " status TEXT, input TEXT, result TEXT, UNIQUE (session, id));"
            "CREATE TABLE log (session TEXT, log TEXT, seq BIGINT, part INT, data BYTEA,"
            " PRIMARY KEY (session, log, seq, part))"
        )
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO ops (session, id, status) VALUES ('pre', %s, 'queued')",
                            [(str(n),) for n in range(PREFILLED)])
            cur.executemany("INSERT INTO log VALUES ('s', 'page', %s, 0, %s)", [(n, b"x" * 80) for n in range(1, 101)])
        raws: dict[str, Callable[[int], object]] = {
            "enqueue (new)": lambda i: conn.execute(
                "INSERT INTO ops (session, id, status, input) VALUES ('s', %s, 'queued', '{}')", (f"r{i}",)),
            "start": lambda i: conn.execute(
                "UPDATE ops SET status = 'running' WHERE session = 'pre' AND id = %s", (str(i),)),
            "settle": lambda i: conn.execute(
                "UPDATE ops SET status = 'done', result = '{}' WHERE session = 'pre' AND id = %s", (str(i),)),
            "append 1 entry": lambda i: conn.execute("INSERT INTO log VALUES ('s', 'log', %s, 0, %s)", (i, b"x" * 80)),
            "read 100 entries": lambda i: conn.execute(
                "SELECT seq, data FROM log WHERE session = 's' AND log = 'page' ORDER BY seq LIMIT 100").fetchall(),
        }
        with open_harness_store(url) as store:
            rows = measure(store, raws, "PostgreSQL")
        conn.close()
    return rows


def run() -> str:
    with tempfile.TemporaryDirectory() as directory:
        rows = sqlite_rows(directory)
    rows += postgres_rows()
    lines = [
        "## Harness store",
        "",
        "One process, one thread; each operation against the raw driver running the bare statement it",
        "boils down to, with the same durability (SQLite WAL + `synchronous=FULL`; PostgreSQL commits).",
        f"Best of {ROUNDS} alternating rounds of {SECONDS:g} s each.",
        "",
        "| backend | operation | store ops/s | raw ops/s | store / raw |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {b} | {name} | {ours:,.0f} | {raw:,.0f} | {ours / raw:.2f} |" for b, name, ours, raw in rows]
    if not any(row[0] == "PostgreSQL" for row in rows):
        lines += ["", f"PostgreSQL was not reachable at {PG_URL}: not measured."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
