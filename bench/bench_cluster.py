"""Benchmark: the Redis state store on a Redis Cluster against the same store on one Redis.

``run()`` starts a local three-master cluster and one Redis, all with the same settings (no
persistence), and returns a Markdown section: put, get and append on the cluster against the same
calls on the one Redis (target ≥ 0.8×), and how the keys of 1,000 sessions spread over the masters
(target: each master within 2× of the mean). The two stores are four server processes on a machine
other work shares. One call at a time, the calls are paired one by one (a call to one store, then to
the other, the order turning each time) and compared by their median times, which a burst of load
elsewhere moves alike; with 8 tasks in flight a call's time is mostly its wait behind the others', so
there the two alternate in many short bursts (``bench_backends._rates``) and throughputs are compared.
Everything it starts is stopped and removed. ``python bench/bench_cluster.py`` prints it.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import redis

from keepstate.scope import scope_namespace
from keepstate.stores import open_database
from keepstate.stores.base import StateFacet

from .bench_backends import TASKS, VALUE, Op, _rates

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from private_services import PrivateRedis
from redis_cluster import LocalCluster

SESSIONS = 1000
CALLS = 3000
"""Pairs of calls per operation, one at a time."""
SECONDS, ROUNDS = 8.0, 80
"""With tasks in flight: seconds of each side per operation, in this many bursts each."""
REPEATS = 3
"""The whole comparison, again: each figure is the median of the repeats' (load elsewhere comes and goes
over minutes)."""
SCOPES = 50
"""Calls go to this many session scopes in turn, so they spread over the masters."""
ITEM = b'{"i":1}'

Row = tuple[str, float, float, float]
"""(operation, cluster and one Redis: median µs of one call, or ops/s with tasks, or client CPU µs per
call; the cluster's speed over one Redis's)"""


def _ns(i: int) -> str:
    return scope_namespace("session", "bench", f"s-{i % SCOPES}")


def _calls(store: StateFacet) -> dict[str, Op]:
    async def put(task: int, i: int) -> object:
        return await store.put(_ns(i + task), f"k{task}", VALUE)

    async def get(task: int, i: int) -> object:
        return await store.get(_ns(i + task), f"k{task}")

    async def append(task: int, i: int) -> object:
        return await store.append(_ns(i + task), f"log{task}", [ITEM])

    return {"put": put, "get": get, "append": append}


async def _paired(mine: Op, theirs: Op) -> tuple[float, float, float, float]:
    """Median seconds of one call of ``mine`` and of ``theirs``, called in pairs, and the mean CPU
    seconds this process spent on one call of each (what bounds throughput when the client is busy)."""
    times: tuple[list[float], list[float]] = ([], [])
    cpu = [0.0, 0.0]
    sides = (mine, theirs)
    for i in range(-100, CALLS):  # the first 100 warm up: connections, scripts
        for side in (0, 1) if i % 2 else (1, 0):
            started, used = time.perf_counter(), time.process_time()
            await sides[side](0, i)
            if i >= 0:
                times[side].append(time.perf_counter() - started)
                cpu[side] += time.process_time() - used
    return statistics.median(times[0]), statistics.median(times[1]), cpu[0] / CALLS, cpu[1] / CALLS


async def _compare(cluster_url: str, single_url: str) -> tuple[list[Row], list[Row], list[Row]]:
    """(one call at a time, its client CPU, with tasks in flight)"""
    on_cluster, on_one = open_database(cluster_url), open_database(single_url)
    try:
        mine, theirs = _calls(await on_cluster.state()), _calls(await on_one.state())
        alone, cpu, busy = [], [], []
        for name in ("put", "get", "append"):
            cluster, one, cluster_cpu, one_cpu = await _paired(mine[name], theirs[name])
            alone.append((name, cluster * 1e6, one * 1e6, one / cluster))
            cpu.append((name, cluster_cpu * 1e6, one_cpu * 1e6, one_cpu / cluster_cpu))
        for name in ("put", "get", "append"):
            busy.append((name, *await _rates(mine[name], theirs[name], TASKS, SECONDS, ROUNDS)))
        return alone, cpu, busy
    finally:
        await on_cluster.aclose()
        await on_one.aclose()


async def _fill(url: str) -> None:
    """1,000 sessions, each a value and a short list in its session scope."""
    database = open_database(url)
    state = await database.state()
    try:
        for n in range(SESSIONS):
            ns = scope_namespace("session", "chat", f"session-{n}")
            await state.put(ns, "profile", VALUE)
            await state.append(ns, "history", [ITEM, ITEM])
    finally:
        await database.aclose()


def _spread(cluster: LocalCluster, prefix: str) -> list[int]:
    """Keys under ``prefix`` on each master."""
    counts = []
    for index in cluster.masters():
        with redis.Redis(port=cluster.ports[index]) as node:
            counts.append(sum(1 for _ in node.scan_iter(match=prefix + "*", count=1000)))
    return counts


def _medians(repeats: list[list[Row]]) -> list[Row]:
    """Per row, the median of each figure over the repeats."""
    return [
        (rows[0][0], *(statistics.median(row[i] for row in rows) for i in (1, 2, 3)))
        for rows in zip(*repeats, strict=True)
    ]


def _table(header: str, rows: list[Row]) -> list[str]:
    return [
        f"| {header} | cluster / one Redis |",
        "| --- | ---: | ---: | ---: |",
        *[f"| {name} | {mine:,.0f} | {theirs:,.0f} | {ratio:.2f}x |" for name, mine, theirs, ratio in rows],
        "",
    ]


def _section(alone: list[Row], cpu: list[Row], busy: list[Row], counts: list[int], load: float) -> str:
    mean = statistics.mean(counts)
    worst = min(row[3] for row in alone + busy)
    spread_ok = all(mean / 2 <= count <= mean * 2 for count in counts)
    lines = [
        "## Redis Cluster",
        "",
        "The Redis state store on a local three-master Redis Cluster against the same store on one local "
        f"Redis with the same settings (no persistence), from one asyncio process; calls go to {SCOPES} session "
        f"scopes in turn (spread over the masters). One call at a time: {CALLS:,} pairs of calls (one to each "
        "store, the order turning each time); the ratio is one Redis's median time over the cluster's. With "
        f"{TASKS} tasks in flight: {SECONDS:.0f} s of each, alternating in {ROUNDS} bursts; the ratio is the "
        "median of the bursts' throughput ratios. Above 1: the cluster is faster. Each figure is the median of "
        f"{REPEATS} such runs. The machine's load average was {load:.1f} when they began (2 cores: the four "
        "servers and the client compete with other work).",
        "",
        *_table("operation, one call at a time | cluster µs (median) | one Redis µs (median)", alone),
        *_table(f"operation, {TASKS} tasks | cluster ops/s | one Redis ops/s", busy),
        "The client's CPU per call, from the one-at-a-time runs (what bounds the throughput of a busy client: "
        "redis-py's cluster client routes each call by its keys' slot):",
        "",
        *_table("operation | cluster CPU µs per call | one Redis CPU µs per call", cpu),
        f"Keys of {SESSIONS:,} sessions (a value and a list each: {sum(counts):,} keys with the per-slot "
        f"expiry sets and key indexes) per master: {', '.join(f'{c:,}' for c in counts)} "
        f"(mean {mean:,.0f}; each within {max(max(counts) / mean, mean / min(counts)):.2f}x of it).",
        "",
        f"Targets: every operation >= 0.8x one Redis: {worst:.2f}x at worst, {'met' if worst >= 0.8 else 'MISSED'}; "
        f"each master within 2x of the mean: {'met' if spread_ok else 'MISSED'}.",
        "",
    ]
    return "\n".join(lines)


def run() -> str:
    """The Markdown section ``## Redis Cluster``."""
    cluster, one = LocalCluster(), PrivateRedis()  # the same redis-server settings: no persistence
    load = os.getloadavg()[0]
    try:
        cluster.start()
        one.start()
        runs = [
            asyncio.run(_compare(cluster.url(f"bench{n}:"), f"redis://127.0.0.1:{one.port}/0?prefix=bench{n}:"))
            for n in range(REPEATS)
        ]
        alone, cpu, busy = (_medians([run[part] for run in runs]) for part in range(3))
        asyncio.run(_fill(cluster.url("spread:")))
        counts = _spread(cluster, "spread:")
    finally:
        one.stop()
        cluster.destroy()
    return _section(alone, cpu, busy, counts, load)


if __name__ == "__main__":
    print(run())
