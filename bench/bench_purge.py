"""Lifecycle benchmark: does a purge, the agents' bookkeeping or the store metrics cost the serving path?

1. **Purge while serving.** One ``keepstate serve`` answers state GETs (``bench_http``'s load
   generator, a few keep-alive connections) while ``keepstate purge`` — another process, as an
   operator runs it — deletes ``ROWS`` finished runs (and their invocations) in batches. GET latency is
   measured in windows of ``WINDOW_S`` in pairs: one with the purge running, one with it stopped between
   two batches, so drift on a shared machine falls on both alike. Target: p99 while purging within 2x
   of idle.
2. **Claims and agents.** An empty claim (what a polling worker does most) through the platform
   rules, with the per-process throttled ``ks_agents`` upsert on and off, in alternating rounds.
3. **Store latency metrics.** A state GET through the timing proxy (``server.metrics.Timed``) against
   the bare facet, alternating rounds; and one ``agent_stats`` read (what a scrape costs the store
   every ``RUNS_CACHE_S``) at ``ROWS`` runs.

On SQLite and PostgreSQL. ``run()`` returns a markdown ``## Lifecycle: purge, claims, metrics`` section.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_http import LOADGEN, get_request, keepstate_token
from bench.bench_scaleout import throwaway_schema
from bench.timing import table
from keepstate.clock import now_ms
from keepstate.platform import Invocations, open_platform
from keepstate.platform.models import Caller
from keepstate.platform.upkeep import PURGE_BATCH, PURGE_DUTY
from keepstate.server.metrics import StoreCollector, Timed
from keepstate.stores.base import StateFacet
from keepstate.stores.postgres.platform_sql import PURGE
from keepstate.stores.sqlite.db import sqlite_path
from serverproc import running_server

ROWS = int(os.environ.get("KEEPSTATE_BENCH_PURGE_ROWS", "100000"))
WINDOW_S = 1.0
CONNECTIONS = 4
STOP_TRIES = 1000
CLAIMS = 2000
GETS = 5000
ROUNDS = 5
MAIN = "from keepstate.cli import main; main(prog_name='keepstate')"
OLD = 10 * 86_400_000


@contextmanager
def sqlite_store() -> Iterator[str]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ks-bench-purge-") as folder:
        yield f"sqlite:///{Path(folder) / 'purge.db'}"


# ---------------------------------------------------------------- 1. purge while serving


def _rows(start: int, count: int, updated_at: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``count`` finished runs as the import path writes them, each with its ended invocation."""
    runs, invocations = [], []
    for n in range(start, start + count):
        run_id = f"run_old_{n}"
        status = ("done", "failed", "cancelled", "expired")[n % 4]
        runs.append(
            {
                "id": run_id,
                "env": "default",
                "agent": f"agent{n % 8}",
                "owner": "k",
                "caller": "k",
                "status": status,
                "input": b'{"message":"an old turn"}',
                "output": b'{"reply":"done"}',
                "error": b"null",
                "hold": b"null",
                "decision": b"null",
                "created_at": updated_at,
                "updated_at": updated_at,
            }
        )
        invocations.append(
            {
                "id": f"inv_old_{n}",
                "env": "default",
                "run_id": run_id,
                "agent": f"agent{n % 8}",
                "kind": "start",
                "status": status,
                "created_at": updated_at,
            }
        )
    return runs, invocations


async def load_finished(store: str, count: int) -> None:
    platform = await open_platform(store)
    try:
        for start in range(0, count, 5000):
            runs, invocations = _rows(start, min(5000, count - start), now_ms() - OLD)
            await platform.repo.load("ks_runs", runs)
            await platform.repo.load("ks_invocations", invocations)
    finally:
        await platform.aclose()


def window(url: str, token: str) -> dict[str, float]:
    """One ``WINDOW_S`` of state GETs at ``CONNECTIONS`` connections: req/s, p50 and p99 (ms)."""
    import json

    host, port = url.removeprefix("http://").split(":")
    args = [sys.executable, "-c", LOADGEN, host, port, str(WINDOW_S), "0.2", str(CONNECTIONS)]
    out = subprocess.run(args, input=get_request(token), capture_output=True, check=True, timeout=60)
    found: dict[str, float] = json.loads(out.stdout)
    return found


def settle(store: str) -> None:
    """What a store whose old runs were written long ago looks like: PostgreSQL's visibility map and
    statistics made (else autovacuum's pass over the fresh rows lands in the windows), SQLite's WAL
    checkpointed."""
    if store.startswith("sqlite"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(sqlite_path(store))) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return
    import psycopg

    with psycopg.connect(store, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE ks_runs, ks_invocations")


def mid_batch(store: str) -> bool:
    """Whether a purge batch is under way: SQLite's write lock held, or PostgreSQL running the statement
    (each batch is one autocommitted statement there, so nothing is held between two)."""
    if store.startswith("sqlite"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(sqlite_path(store), timeout=0)) as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return True
            conn.execute("ROLLBACK")
            return False
    import psycopg

    with psycopg.connect(store) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state <> 'idle' AND query LIKE %s",
            (PURGE.split("\n", 1)[0] + "%",),
        ).fetchone()
    return bool(row and row[0])


def stop_between_batches(purge: subprocess.Popen[str], store: str) -> None:
    """SIGSTOP the purge in one of its pauses, never inside a batch: stopped there it would hold SQLite's
    write lock (the servers' sweeps would queue behind it), or leave PostgreSQL finishing the batch
    inside the idle window."""
    for _ in range(STOP_TRIES):
        purge.send_signal(signal.SIGSTOP)
        if purge.poll() is not None or not mid_batch(store):
            return
        purge.send_signal(signal.SIGCONT)
        time.sleep(0.005)
    raise RuntimeError("the purge was never between two batches")


def purge_while_serving(store: str) -> dict[str, Any]:
    """Windows in pairs while the purge runs: one with it running, one with it stopped (SIGSTOP), so
    each purging window has an idle one next to it under the same drift, the same table and cache."""
    asyncio.run(load_finished(store, ROWS))
    settle(store)
    key = f"ks_bench_{secrets.token_urlsafe(16)}"
    with running_server(store, admin_key=key, lease=3600) as server:
        token = keepstate_token(server.url, key)
        window(server.url, token)  # warm-up
        purge = subprocess.Popen(
            [sys.executable, "-c", MAIN, "purge", "--store", store, "--older-than", "5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        pairs, running = [], 0.0
        try:
            while purge.poll() is None:
                started = time.perf_counter()
                purging = window(server.url, token)
                stop_between_batches(purge, store)
                running += time.perf_counter() - started
                pairs.append((purging, window(server.url, token)))
                purge.send_signal(signal.SIGCONT)
        finally:
            purge.send_signal(signal.SIGCONT)
            out, err = purge.communicate(timeout=600)
    if purge.returncode != 0 or not out.startswith(f"purged {ROWS} "):
        raise RuntimeError(f"the purge failed: {out} {err}")
    return {"pairs": pairs, "seconds": running}


# ---------------------------------------------------------------- 2. claims, 3. metrics


async def _rate(fn: Callable[[int], Awaitable[object]], count: int) -> float:
    started = time.perf_counter()
    for index in range(count):
        await fn(index)
    return count / (time.perf_counter() - started)


async def paired_async(
    raw: Callable[[int], Awaitable[object]], ours: Callable[[int], Awaitable[object]], count: int
) -> tuple[float, float, float]:
    """``timing.paired`` for coroutines: alternating rounds, medians of each and of the ratios."""
    pairs = [(await _rate(raw, count), await _rate(ours, count)) for _ in range(ROUNDS)]
    return (
        statistics.median(r for r, _ in pairs),
        statistics.median(o for _, o in pairs),
        statistics.median(o / r for r, o in pairs),
    )


async def claims_and_metrics(store: str) -> dict[str, Any]:
    platform = await open_platform(store)
    try:
        worker = Caller("default", "worker", "k-bench")
        plain, recording = Invocations(platform), Invocations(platform)
        plain.touch_every = math.inf  # never records: the claim path before ks_agents

        async def empty_claim(invocations: Invocations) -> None:
            assert await invocations.claim(worker, ["nobody-queued"], 0) is None

        claim = await paired_async(lambda _: empty_claim(plain), lambda _: empty_claim(recording), CLAIMS)
        facet = platform.state
        await facet.put("default/agent/bench/", "k", b'{"n":1}')
        timed: StateFacet = Timed(facet, StoreCollector(), "state")  # type: ignore[assignment]
        get = await paired_async(
            lambda _: facet.get("default/agent/bench/", "k"), lambda _: timed.get("default/agent/bench/", "k"), GETS
        )
        started = time.perf_counter()
        stats = await platform.repo.agent_stats(None)
        scrape_ms = (time.perf_counter() - started) * 1000
        runs = sum(sum(agent.runs.values()) for agent in stats)
    finally:
        await platform.aclose()
    return {"claim": claim, "get": get, "scrape_ms": scrape_ms, "runs": runs}


# ---------------------------------------------------------------- the section


def measure(name: str, store_of: Callable[[], Any]) -> dict[str, Any]:
    with store_of() as store:
        asyncio.run(load_finished(store, ROWS))  # the metrics read counts a full table
        figures = asyncio.run(claims_and_metrics(store))
    with store_of() as store:
        figures |= purge_while_serving(store)
    figures["name"] = name
    return figures


def _ratios(pairs: list[tuple[dict[str, float], dict[str, float]]]) -> list[float]:
    """Each purging window's p99 over that of the stopped window after it."""
    return [purging["p99"] / stopped["p99"] for purging, stopped in pairs]


def run() -> str:
    results = [measure("SQLite", sqlite_store), measure("PostgreSQL", throwaway_schema)]
    rows: list[tuple[object, ...]] = []
    for r in results:
        purging, stopped = [p for p, _ in r["pairs"]], [s for _, s in r["pairs"]]
        ratios = _ratios(r["pairs"])
        rows.append(
            (
                r["name"],
                f"{r['seconds']:.1f}",
                f"{ROWS / r['seconds']:,.0f}",
                len(r["pairs"]),
                f"{statistics.median(w['rps'] for w in stopped):,.0f}",
                f"{statistics.median(w['rps'] for w in purging):,.0f}",
                f"{statistics.median(w['p99'] for w in stopped):.2f}",
                f"{statistics.median(w['p99'] for w in purging):.2f}",
                f"{statistics.median(ratios):.2f}x ({max(ratios):.2f}x)",
            )
        )
    purge_table = table(
        (
            "store",
            "purge s",
            "runs/s",
            "pairs",
            "GET/s stopped",
            "GET/s purging",
            "p99 ms stopped",
            "p99 ms purging",
            "purging / stopped (worst pair)",
        ),
        rows,
    )
    cost_rows: list[tuple[object, ...]] = []
    for r in results:
        plain, recording, ratio = r["claim"]
        raw, timed, get_ratio = r["get"]
        cost_rows.append(
            (
                r["name"],
                f"{plain:,.0f}",
                f"{recording:,.0f}",
                f"{ratio:.2f}",
                f"{raw:,.0f}",
                f"{timed:,.0f}",
                f"{get_ratio:.2f}",
                f"{r['scrape_ms']:.1f}",
            )
        )
    cost_table = table(
        (
            "store",
            "empty claims/s",
            "with ks_agents",
            "ratio",
            "state get/s bare",
            "timed",
            "ratio",
            f"agent_stats ms at {ROWS:,} runs",
        ),
        cost_rows,
    )
    verdict = ", ".join(f"{r['name']} {statistics.median(_ratios(r['pairs'])):.2f}x" for r in results)
    share = 1 / (1 + PURGE_DUTY)
    lines = [
        "## Lifecycle: purge, claims, metrics",
        "",
        f"**Purge while serving.** One `keepstate serve` answers state GETs at {CONNECTIONS} keep-alive connections "
        f"(closed loop) in {WINDOW_S:.0f} s windows while `keepstate purge --older-than 5` (another process, as an "
        f"operator runs it) deletes {ROWS:,} finished runs and their invocations ({PURGE_BATCH:,} per "
        "transaction). The windows come in pairs: one with the purge running, one with it stopped between two "
        "batches (SIGSTOP, then SIGCONT for the next pair), so each purging window has an idle one beside it "
        "under the same drift of this shared machine, the same tables and the same caches. The old runs are "
        "settled first (PostgreSQL: `VACUUM ANALYZE`, as autovacuum would have long since; SQLite: WAL checkpointed). "
        "p99s are the medians of the windows'; the ratio is the median of the pairs' ratios, the worst pair in "
        "brackets. *purge s* counts only the time the purge ran.",
        "",
        purge_table,
        "",
        f"Target (p99 while purging within 2x of idle): {verdict}. A purge pauses after each batch {PURGE_DUTY:g} "
        f"times as long as the batch took, so it works at most {share:.0%} of its time. Load generator, server, "
        f"purge and PostgreSQL share this machine's {os.cpu_count()} cores with other work: the figures move "
        "from run to run. Autovacuum's later pass over the purged tables is not in the windows.",
        "",
        f"**Claims, metrics.** In one process, {ROUNDS} alternating rounds each: {CLAIMS:,} empty claims through "
        "the platform rules with the per-process throttled `ks_agents` upsert (at most once per agent every 5 s) "
        f"off and on; {GETS:,} state-facet GETs bare and through the store-latency timing proxy; one "
        f"`agent_stats` read (what a `/metrics` scrape costs the store, at most every 5 s) at {ROWS:,} runs.",
        "",
        cost_table,
        "",
        _reading(results),
    ]
    return "\n".join(lines) + "\n"


def _reading(results: list[dict[str, Any]]) -> str:
    proxy_us = {r["name"]: (1 / r["get"][1] - 1 / r["get"][0]) * 1e6 for r in results}
    return (
        "Reading: an empty claim, the call a polling worker repeats, costs what it did before agents were "
        "recorded (the upsert happens once per agent per 5 s per process). The timing proxy costs about "
        f"{proxy_us['SQLite']:.1f} µs per store call on SQLite's in-process reads (a state GET over HTTP costs the "
        "server some 100 µs or more); on PostgreSQL it is lost in the round trip's noise "
        f"({proxy_us['PostgreSQL']:+.1f} µs). The run counts a scrape reads take milliseconds at this size, at "
        "most every 5 s per server, and on SQLite off the event loop's thread."
    )


if __name__ == "__main__":
    print(run())
