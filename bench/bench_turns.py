"""Turns benchmark: what starting a run and claiming it cost through the platform rules, in one process.

1. **Turns.** ``TURNS`` turns one after another in one session: start (``reject``, the default), a
   worker's claim (``Invocations.claim``: the cheap ``has_queued`` read, then the claiming write), complete.
2. **Claims from a backlog.** ``BACKLOG`` runs queued, each in a session of its own, then claimed one by
   one: each claim passes the claim's turn guard (``sql.TURN_FREE``) for the run at the queue's head.
3. **Claims behind waiting turns** (``multitask`` enqueue): ``BACKLOG`` runs enqueued in ``SESSIONS``
   sessions, claimed and completed one by one, the head of the queue full of turns waiting for their
   session: each claim walks past them to the first one whose turn it is. A store without ``multitask``
   (before it existed) shows n/a.
4. **The claim's statements alone**, where a commit's fsync does not drown them: with ``STATEMENT_RUNS``
   runs queued each in its own session, the store's own ``has_queued`` read, and a claim (on
   PostgreSQL its transaction: the key's lock, the claim, the run's start) rolled back, each
   ``STATEMENTS`` times on one connection (psycopg prepares them, as the server's pool does).

Rounds alternate the first three, ``ROUNDS`` times, on SQLite and PostgreSQL; the figures are medians. Run
it on two versions of the code to compare them (``python -m bench turns`` writes the section; run as
``python -m bench.bench_turns`` it prints the figures as JSON, for a comparison run with another
``PYTHONPATH``).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_scaleout import throwaway_schema
from bench.timing import table
from keepstate.clock import now_ms
from keepstate.errors import SessionBusy
from keepstate.platform import Invocations, Platform, open_platform
from keepstate.platform.models import Caller
from keepstate.stores.postgres import platform_sql as pg_sql
from keepstate.stores.records import StoredKey
from keepstate.stores.sql import platform as sql
from keepstate.stores.sqlite.db import sqlite_path

TURNS = int(os.environ.get("KEEPSTATE_BENCH_TURNS", "500"))
BACKLOG = int(os.environ.get("KEEPSTATE_BENCH_TURNS_BACKLOG", "1000"))
SESSIONS = 10
ROUNDS = 3
STATEMENT_RUNS = 300
STATEMENTS = 1000
AGENT = "bench-turns"
"""Each measurement its own agent (``AGENT-turns``...): a claim never takes what another one left queued."""
ADMIN = Caller("default", "admin", "k-bench-admin")
WORKER = Caller("default", "worker", "k-bench-worker")


@contextmanager
def sqlite_store() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="ks-bench-turns-") as folder:
        yield f"sqlite:///{Path(folder) / 'turns.db'}"


async def _session(platform: Platform) -> str:
    session, _ = await platform.create_session(ADMIN, {})
    return session.id


async def _claim_and_complete(invocations: Invocations, agent: str) -> None:
    claimed = await invocations.claim(WORKER, [agent], 0)
    assert claimed is not None and claimed.token is not None
    await invocations.finish(claimed.token, claimed.invocation.id, "complete", {"output": 1})


async def turns(platform: Platform, invocations: Invocations) -> float:
    """Turns per second: start, claim, complete, one after another in one session."""
    sid, agent = await _session(platform), f"{AGENT}-turns"
    started = time.perf_counter()
    for _ in range(TURNS):
        await platform.start_run(ADMIN, {"agent": agent, "session_id": sid})
        await _claim_and_complete(invocations, agent)
    return TURNS / (time.perf_counter() - started)


async def backlog_claims(platform: Platform, invocations: Invocations) -> float:
    """Claims per second from ``BACKLOG`` queued runs, each in its own session."""
    agent = f"{AGENT}-backlog"
    for _ in range(BACKLOG):
        await platform.start_run(ADMIN, {"agent": agent, "session_id": await _session(platform)})
    started = time.perf_counter()
    for _ in range(BACKLOG):
        assert await invocations.claim(WORKER, [agent], 0) is not None
    return BACKLOG / (time.perf_counter() - started)


async def enqueued_claims(platform: Platform, invocations: Invocations) -> float | None:
    """Claims (each completed) per second from ``BACKLOG`` runs enqueued in ``SESSIONS`` sessions; None
    when the store has no ``multitask`` (an enqueue is refused as busy)."""
    sessions, agent = [await _session(platform) for _ in range(SESSIONS)], f"{AGENT}-enqueued"
    try:
        for n in range(BACKLOG):
            body = {"agent": agent, "session_id": sessions[n % SESSIONS], "multitask": "enqueue"}
            await platform.start_run(ADMIN, body)
    except SessionBusy:
        return None
    started = time.perf_counter()
    for _ in range(BACKLOG):
        await _claim_and_complete(invocations, agent)
    return BACKLOG / (time.perf_counter() - started)


async def _rounds(store: str, phases: list[Callable[[Platform, Invocations], Awaitable[float | None]]]) -> list[Any]:
    """``ROUNDS`` alternating rounds of ``phases`` on one store; each phase's median (None: not measurable)."""
    platform = await open_platform(store)
    try:
        await platform.repo.add_key(StoredKey(WORKER.key_id, "default", "worker", "bench", now_ms()), "bench-hash")
        invocations = Invocations(platform)
        rounds = [[await phase(platform, invocations) for phase in phases] for _ in range(ROUNDS)]
    finally:
        await platform.aclose()
    columns = [[figure for figure in column if figure is not None] for column in zip(*rounds, strict=True)]
    return [statistics.median(column) if column else None for column in columns]


async def _queue_apart(store: str, agent: str) -> None:
    """``STATEMENT_RUNS`` runs of ``agent`` queued, each in a session of its own (and the worker's key)."""
    platform = await open_platform(store)
    try:
        await platform.repo.add_key(StoredKey(WORKER.key_id, "default", "worker", "bench", now_ms()), "bench-hash")
        for _ in range(STATEMENT_RUNS):
            await platform.start_run(ADMIN, {"agent": agent, "session_id": await _session(platform)})
    finally:
        await platform.aclose()


def _sqlite_statements(store: str, agent: str) -> tuple[float, float]:
    """µs of a ``has_queued`` read and of a claim rolled back, on SQLite."""
    import sqlite3

    conn = sqlite3.connect(sqlite_path(store), isolation_level=None)
    try:
        reading = time.perf_counter()
        for _ in range(STATEMENTS):
            conn.execute(sql.has_queued([agent]), ("default", agent, now_ms())).fetchone()
        read = (time.perf_counter() - reading) / STATEMENTS
        claiming = time.perf_counter()
        for n in range(STATEMENTS):
            conn.execute("BEGIN IMMEDIATE")
            now = now_ms()
            params = (f"bench-{n}", now + 60_000, WORKER.key_id, "default", agent, now, WORKER.key_id)
            assert conn.execute(sql.claim([agent]), params).fetchone() is not None
            conn.execute("ROLLBACK")
        return read * 1e6, (time.perf_counter() - claiming) / STATEMENTS * 1e6
    finally:
        conn.close()


def _numbered(statement: str) -> str:
    """psycopg's ``%s`` placeholders as PostgreSQL's ``$1, $2...``, for a ``PREPARE``."""
    parts = statement.split("%s")
    return parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))


async def _postgres_statements(store: str, agent: str) -> tuple[float, float]:
    """µs of a ``has_queued`` read and of a claim's transaction rolled back, on PostgreSQL. The statements
    are prepared with ``PREPARE`` as psycopg prepares them on a server's connections after their fifth
    run (psycopg itself forgets its prepared statements at every rollback), after an ``ANALYZE``: on a
    fresh table without statistics PostgreSQL may serve the claim's turn guard with the environment's
    index of runs instead of the session's, a scan of every run of the environment."""
    import psycopg

    prepared = {
        "hq": pg_sql.has_queued([agent]),
        "lock": pg_sql.LOCK_LIVE_KEY,
        "claim": pg_sql.claim([agent]),
        "start": pg_sql.pg(sql.START_RUN),
    }
    connect = psycopg.AsyncConnection.connect(store, autocommit=True, cursor_factory=psycopg.AsyncClientCursor)
    async with await connect as conn:  # values bound in the client: EXECUTE takes no bind parameters
        await conn.execute("ANALYZE")  # as autovacuum would have by then: plans from the table's statistics
        for name, statement in prepared.items():
            await conn.execute(f"PREPARE {name} AS {_numbered(statement)}".encode())
        reading = time.perf_counter()
        for _ in range(STATEMENTS):
            await (await conn.execute("EXECUTE hq(%s, %s, %s)", ("default", agent, now_ms()), prepare=False)).fetchone()
        read = (time.perf_counter() - reading) / STATEMENTS
        claiming = time.perf_counter()
        for n in range(STATEMENTS):
            async with conn.transaction(force_rollback=True):
                lock = await conn.execute("EXECUTE lock(%s)", (WORKER.key_id,), prepare=False)
                assert await lock.fetchone() is not None
                now = now_ms()
                params = (f"bench-{n}", now + 60_000, WORKER.key_id, "default", agent, now)
                claim = await conn.execute("EXECUTE claim(%s, %s, %s, %s, %s, %s)", params, prepare=False)
                row = await claim.fetchone()
                assert row is not None
                await conn.execute("EXECUTE start(%s, %s)", (now, row[2]), prepare=False)
        return read * 1e6, (time.perf_counter() - claiming) / STATEMENTS * 1e6


def statements(store: str) -> tuple[float, float]:
    agent = f"{AGENT}-statements"
    asyncio.run(_queue_apart(store, agent))
    if store.startswith("sqlite"):
        return _sqlite_statements(store, agent)
    return asyncio.run(_postgres_statements(store, agent))


def measure() -> dict[str, dict[str, Any]]:
    """Each store twice: turns and backlog claims on one, enqueued claims on a fresh one, so the thousands
    of extra turns these make never weigh on the first two (nor does a version without ``multitask``,
    which makes none, get a smaller store to measure on)."""
    figures = {}
    for name, store_of in (("SQLite", sqlite_store), ("PostgreSQL", throwaway_schema)):
        with store_of() as store:
            turned, backlog = asyncio.run(_rounds(store, [turns, backlog_claims]))
        with store_of() as store:
            (enqueued,) = asyncio.run(_rounds(store, [enqueued_claims]))
        with store_of() as store:
            read_us, claim_us = statements(store)
        figures[name] = {
            "turns": turned,
            "backlog": backlog,
            "enqueued": enqueued,
            "has_queued_us": read_us,
            "claim_us": claim_us,
        }
    return figures


def run() -> str:
    figures = measure()
    rows: list[tuple[object, ...]] = [
        (
            name,
            f"{f['turns']:,.0f}",
            f"{f['backlog']:,.0f}",
            "n/a" if f["enqueued"] is None else f"{f['enqueued']:,.0f}",
            f"{f['has_queued_us']:.1f}",
            f"{f['claim_us']:.1f}",
        )
        for name, f in figures.items()
    ]
    return "\n".join(
        [
            "## Turns: start, claim, complete",
            "",
            f"In one process through the platform rules (`Platform.start_run`, `Invocations.claim`), {ROUNDS} "
            f"alternating rounds, medians: {TURNS:,} turns one after another in one session (start, claim, "
            f"complete); {BACKLOG:,} claims from as many runs queued each in its own session; {BACKLOG:,} "
            f"claims (each completed) from as many runs enqueued (`multitask`) in {SESSIONS} sessions, where "
            "a claim walks past the turns waiting for their session. Then the claim's statements alone, "
            f"{STATEMENTS:,} times each with {STATEMENT_RUNS} runs queued: a `has_queued` read, and a claim "
            "(PostgreSQL: its whole transaction) rolled back, in µs.",
            "",
            table(
                (
                    "store",
                    "turns/s",
                    "claims/s (backlog)",
                    "claims/s (enqueued)",
                    "has_queued µs",
                    "claim rolled back µs",
                ),
                rows,
            ),
        ]
    )


if __name__ == "__main__":
    print(json.dumps(measure()))
