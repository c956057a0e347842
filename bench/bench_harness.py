"""Harness store: each operation against the raw driver writing the same rows, in one run.

SQLite (a file, WAL, ``synchronous=FULL``: one fsync per commit on both sides) and, when it is
reachable, PostgreSQL (a fresh schema, dropped afterwards). The raw baseline is honest by
construction: its tables are made by the store's own schema steps (prefix ``raw_``, same columns
and indexes) in the same database, its connection has the store's settings, and each raw call
writes the rows the store's call writes (same columns, same bytes) in one transaction, with
nothing around them. Reads are timed at the start and at the end of a 10,000-entry log, so
"linear in the entries read, not in the log's length" shows in the table.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import count
from typing import Any
from urllib.parse import quote

import orjson

from keepstate.harness import Done, HarnessStore, LogAppend, open_harness_store
from keepstate.stores.sql.harness import steps

SECONDS = 0.8
ROUNDS = 3
PG_URL = os.environ.get("KEEPSTATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
ENTRY = {"role": "assistant", "content": "a short reply of a few dozen bytes, like most log entries"}
DATA = orjson.dumps(ENTRY)
"""The bytes the store keeps for ``ENTRY`` (compact JSON, one row): the raw side writes the same."""
PREFILLED = 60_000
"""Queued operations waiting for ``start`` and ``settle``: more than either side gets through in all
its rounds, so no call finds its operation already moved (a no-op write would skip the commit)."""
LONG = 10_000
"""Entries of the log the reads page through."""
Row = tuple[str, str, float, float]
Call = Callable[[int], object]
INSERT_ENTRY = "INSERT INTO raw_entries (session, log, seq, part, id, data, created_at) VALUES (?, ?, ?, 0, NULL, ?, ?)"
INSERT_OP = (
    "INSERT INTO raw_operations (session, id, status, input, meta, result, reason, created_at, settled_at) "
    "VALUES (?, ?, 'queued', ?, 'null', 'null', NULL, ?, NULL)"
)
START = "UPDATE raw_operations SET status = 'running' WHERE session = 'pre' AND id = ? AND status = 'queued'"
SETTLE = (
    "UPDATE raw_operations SET status = 'done', result = ?, reason = NULL, settled_at = ? "
    "WHERE session = 'pre' AND id = ? AND status IN ('queued', 'running')"
)
READ = (
    "SELECT seq, part, id, data, created_at FROM raw_entries WHERE session = 's' AND log = 'long' AND seq > ? "
    "ORDER BY seq, part LIMIT ?"
)
COPY_LONG = "INSERT INTO raw_entries SELECT * FROM harness_entries WHERE session = 's' AND log = 'long'"
COPY_PRE = (
    "INSERT INTO raw_operations (session, id, status, input, meta, result, reason, created_at, settled_at) "
    "SELECT session, id, status, input, meta, result, reason, created_at, settled_at FROM harness_operations "
    "WHERE session = 'pre' ORDER BY seq"
)


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


def numbered(fn: Call) -> Callable[[], object]:
    """``fn`` called with 0, 1, 2, … across every round, so no call repeats an earlier one."""
    counter = count()
    return lambda: fn(next(counter))


def prepare(store: HarnessStore, copy: Callable[[str], object]) -> None:
    """The store's queued operations and long log, and the same rows in the raw tables."""
    with store.transaction():  # operations for start and settle to consume
        for n in range(PREFILLED):
            store.enqueue(session="pre", id=str(n), input=None)
    for _ in range(LONG // 1000):
        store.append("s", "long", [LogAppend(ENTRY) for _ in range(1000)])
    copy(COPY_LONG)
    copy(COPY_PRE)


def store_cases(store: HarnessStore) -> dict[str, Call]:
    return {
        "enqueue (new)": lambda i: store.enqueue(session="s", id=f"e{i}", input=ENTRY),
        "start": lambda i: store.start("pre", str(i)),
        "settle": lambda i: store.settle("pre", str(i), Done(result=ENTRY)),
        "append 1 entry": lambda i: store.append("s", "log1", [LogAppend(ENTRY)]),
        "append 100 entries": lambda i: store.append("s", "log100", [LogAppend(ENTRY) for _ in range(100)]),
        f"read 100 of {LONG:,} (at the start)": lambda i: store.read("s", "long", after=0, limit=100),
        f"read 100 of {LONG:,} (at the end)": lambda i: store.read("s", "long", after=LONG - 100, limit=100),
        f"read all {LONG:,}": lambda i: store.read("s", "long"),
    }


Write = Callable[[str, Sequence[Sequence[Any]]], object]


def raw_cases(write: Write, read: Callable[[int, int], object]) -> dict[str, Call]:
    """The raw calls: ``write(sql, rows)`` runs ``sql`` once per row in one transaction."""
    text = DATA.decode()

    def append(i: int, n: int) -> object:
        return write(INSERT_ENTRY, [("s", f"log{n}", i * n + k + 1, DATA, now()) for k in range(n)])

    return {
        "enqueue (new)": lambda i: write(INSERT_OP, [("s", f"r{i}", text, now())]),
        "start": lambda i: write(START, [(str(i),)]),
        "settle": lambda i: write(SETTLE, [(text, now(), str(i))]),
        "append 1 entry": lambda i: append(i, 1),
        "append 100 entries": lambda i: append(i, 100),
        f"read 100 of {LONG:,} (at the start)": lambda i: read(0, 100),
        f"read 100 of {LONG:,} (at the end)": lambda i: read(LONG - 100, 100),
        f"read all {LONG:,}": lambda i: read(0, LONG),
    }


def now() -> int:
    return time.time_ns() // 1_000_000


def measure(store: HarnessStore, raws: dict[str, Call], backend: str) -> list[Row]:
    return [(backend, name, *best_of(numbered(fn), numbered(raws[name]))) for name, fn in store_cases(store).items()]


def sqlite_rows(directory: str) -> list[Row]:
    from keepstate.stores.sqlite.db import connect, write_transaction

    path = os.path.join(directory, "bench.db")
    conn = connect(path)
    for step in steps("raw_", "sqlite"):
        conn.executescript(step)

    def write(sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with write_transaction(conn):
            conn.executemany(sql, rows)

    def read(after: int, limit: int) -> object:
        return conn.execute(READ, (after, limit)).fetchall()

    with open_harness_store(f"sqlite:///{path}") as store:
        prepare(store, lambda sql: write(sql, [()]))
        rows = measure(store, raw_cases(write, read), "SQLite")
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

    from keepstate.stores.postgres.db import _connect_kwargs

    with pg_schema() as url:
        if url is None:
            return []
        conn = psycopg.connect(url, **_connect_kwargs())  # the store's own connection settings
        for step in steps("raw_", "postgres"):
            conn.execute(step)

        def write(sql: str, rows: Sequence[Sequence[Any]]) -> None:
            """One row: one autocommit statement (its own transaction); more: one pipelined transaction."""
            sql = sql.replace("?", "%s")
            if len(rows) == 1:
                conn.execute(sql, rows[0])
                return
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(sql, rows)

        def read(after: int, limit: int) -> object:
            return conn.execute(READ.replace("?", "%s"), (after, limit)).fetchall()

        with open_harness_store(url) as store:
            prepare(store, lambda sql: write(sql, [()]))
            conn.execute("ANALYZE")
            rows = measure(store, raw_cases(write, read), "PostgreSQL")
        conn.close()
    return rows


def run() -> str:
    with tempfile.TemporaryDirectory() as directory:
        rows = sqlite_rows(directory)
    rows += postgres_rows()
    lines = [
        "## Harness store",
        "",
        "One process, one thread; each operation against the raw driver writing the same rows (tables made",
        "by the store's own schema, same connection settings, one transaction per call) with the same",
        "durability (SQLite WAL + `synchronous=FULL`; PostgreSQL commits). Reads page through a log of",
        f"{LONG:,} one-row entries: reading at its end should cost what reading at its start does.",
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
