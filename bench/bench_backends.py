"""Benchmark: the PostgreSQL and Redis state stores against the raw driver doing the same write.

``run()`` returns a Markdown section. Each store call is timed against the cheapest raw equivalent
on the same connection settings: for PostgreSQL an ``INSERT ... ON CONFLICT DO UPDATE`` of the same
row shape (psycopg 3 async, autocommit), for Redis a Lua compare-and-set script (redis-py asyncio).
One connection sequential, and 8 concurrent tasks. Targets: store put >= 0.7x the raw write; on Redis
an append >= 0.8x RPUSH, set beside the floor of any script-kept append (two rows of scripts alone).
A throwaway schema / key prefix is used and removed. ``python bench/bench_backends.py`` prints it.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import redis.asyncio as aioredis

from keepstate.stores import open_database
from keepstate.stores.base import StateFacet

from .bench_scaleout import throwaway_schema

REDIS_URL = os.environ.get("KEEPSTATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
SECONDS = 1.6
ROUNDS = 8
TASKS = 8
NS = "bench/agent/bench/"
VALUE = b'{"turn":12,"note":"a small state value of some sixty bytes"}'

RAW_PG_TABLE = """CREATE TABLE raw_kv (ns TEXT COLLATE "C", key TEXT COLLATE "C", version BIGINT NOT NULL,
    data BYTEA, PRIMARY KEY (ns, key))"""
RAW_PG_PUT = """INSERT INTO raw_kv AS k (ns, key, version, data) VALUES (%s, %s, 1, %s)
    ON CONFLICT (ns, key) DO UPDATE SET version = k.version + 1, data = excluded.data RETURNING version"""
RAW_PG_GET = "SELECT version, data FROM raw_kv WHERE ns = %s AND key = %s"
RAW_PG_APPEND = """CREATE TABLE raw_items (ns TEXT, key TEXT, seq BIGSERIAL, item BYTEA, PRIMARY KEY (ns, key, seq))"""
RAW_PG_PUSH = "INSERT INTO raw_items (ns, key, item) VALUES (%s, %s, %s)"
SCRIPT_PUSH = "return redis.call('RPUSH', KEYS[1], ARGV[1])"
"""An RPUSH sent through a script: what running any script costs over the bare command."""
SCRIPT_APPEND = """
local f = redis.call('HMGET', KEYS[1], 'v', 'k', 'e', 's', 'n')
local n = redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'v', (tonumber(f[1]) or 0) + 1, 's', (tonumber(f[4]) or 2) + #ARGV[1] + 1, 'n', n)
return {(tonumber(f[1]) or 0) + 1, n}
"""
"""The fewest commands an append that checks kind, expiry and size and keeps a version can run (read
the header, push, write the header), with none of the checks: the floor of a script-kept append."""
RAW_LUA_CAS = """
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= v then return {0, v} end
redis.call('HSET', KEYS[1], 'v', v + 1, 'd', ARGV[1])
return {1, v + 1}
"""

Op = Callable[[int, int], Awaitable[object]]


async def _rates(
    store_op: Op, raw_op: Op, tasks: int = 1, seconds: float = SECONDS, rounds: int = ROUNDS
) -> tuple[float, float, float]:
    """Ops/s of ``store_op`` and ``raw_op`` (each run back to back by ``tasks`` tasks) and their ratio.

    The two alternate in short rounds, so load from elsewhere on the machine hits both alike; the
    ratio is the median of the rounds' ratios, sturdier than the totals against a burst of load.
    """
    counts, spent, ratios = [0, 0], [0.0, 0.0], []
    for op in (store_op, raw_op):  # warm up: pools grown, statements prepared, scripts loaded
        await asyncio.gather(*(op(task, 0) for task in range(tasks)))
    for _ in range(rounds):
        rates = []
        for side, op in enumerate((store_op, raw_op)):
            done, took = await _burst(op, tasks, seconds / rounds)
            counts[side] += done
            spent[side] += took
            rates.append(done / took)
        ratios.append(rates[0] / rates[1])
    return counts[0] / spent[0], counts[1] / spent[1], statistics.median(ratios)


async def _burst(op: Op, tasks: int, seconds: float) -> tuple[int, float]:
    deadline = time.perf_counter() + seconds
    counts = [0] * tasks

    async def loop(task: int) -> None:
        while time.perf_counter() < deadline:
            await op(task, counts[task])
            counts[task] += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(task) for task in range(tasks)))
    return sum(counts), time.perf_counter() - started


def _key(task: int, i: int) -> str:
    return f"t{task}-k{i % 50}"


async def _bench_pg() -> list[Row]:
    with throwaway_schema() as url:
        return await _bench_pg_at(url)


async def _bench_pg_at(url: str) -> list[Row]:
    database = open_database(url)
    store = await database.state()
    raws = [await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=3) for _ in range(TASKS)]
    try:
        await raws[0].execute(RAW_PG_TABLE)
        await raws[0].execute(RAW_PG_APPEND)
        return await _pg_rows(store, raws)
    finally:
        await database.aclose()
        for raw in raws:
            await raw.close()


Row = tuple[str, float, float, float]
"""(operation, store ops/s, raw ops/s, median store/raw ratio)"""


async def _pg_rows(store: StateFacet, raws: list[psycopg.AsyncConnection[Any]]) -> list[Row]:
    async def raw_put(task: int, i: int) -> object:
        return await (await raws[task].execute(RAW_PG_PUT, (NS, _key(task, i), VALUE))).fetchone()

    async def raw_get(task: int, i: int) -> object:
        return await (await raws[task].execute(RAW_PG_GET, (NS, _key(task, i)), binary=True)).fetchone()

    async def raw_push(task: int, i: int) -> object:
        return await raws[task].execute(RAW_PG_PUSH, (NS, f"log{task}", b'{"i":1}'))

    return await _rows(store, raw_put, raw_get, raw_push)


async def _bench_redis() -> list[Row]:
    prefix = f"ks_bench:{uuid.uuid4().hex[:10]}:"
    database = open_database(f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}prefix={prefix}")
    store = await database.state()
    raw = aioredis.Redis.from_url(REDIS_URL, socket_timeout=5, socket_connect_timeout=3)
    cas = raw.register_script(RAW_LUA_CAS)
    script_push, script_append = raw.register_script(SCRIPT_PUSH), raw.register_script(SCRIPT_APPEND)
    try:

        async def raw_put(task: int, i: int) -> object:
            return await cas(keys=[f"{prefix}raw:{_key(task, i)}"], args=[VALUE, ""])

        async def raw_get(task: int, i: int) -> object:
            return await raw.hmget(f"{prefix}raw:{_key(task, i)}", ["v", "d"])

        async def raw_push(task: int, i: int) -> object:
            return await raw.rpush(f"{prefix}raw:log{task}", b'{"i":1}')

        async def push_by_script(task: int, i: int) -> object:
            return await script_push(keys=[f"{prefix}script:log{task}"], args=[b'{"i":1}'])

        async def floor_append(task: int, i: int) -> object:
            tag = f"{prefix}{{floor{task}}}"
            return await script_append(keys=[f"{tag}:h", f"{tag}:l"], args=[b'{"i":1}'])

        floors = [
            ("RPUSH in a one-command script (no store)", push_by_script),
            ("append floor: HMGET, RPUSH, HSET in one script (no store)", floor_append),
        ]
        return [
            *await _rows(store, raw_put, raw_get, raw_push),
            *[(name, *await _rates(op, raw_push, 1)) for name, op in floors],
        ]
    finally:
        await database.aclose()
        async for name in raw.scan_iter(match=prefix + "*", count=1000):
            await raw.delete(name)
        await raw.aclose()


async def _rows(store: StateFacet, raw_put: Op, raw_get: Op, raw_push: Op) -> list[Row]:
    """The same five rows for either backend: (operation, store ops/s, raw ops/s)."""

    async def put(task: int, i: int) -> object:
        return await store.put(NS, _key(task, i), VALUE)

    async def get(task: int, i: int) -> object:
        return await store.get(NS, _key(task, i))

    async def append(task: int, i: int) -> object:
        return await store.append(NS, f"log{task}", [b'{"i":1}'])

    plan: list[tuple[str, Op, Op, int]] = [
        ("put, 1 connection", put, raw_put, 1),
        ("get, 1 connection", get, raw_get, 1),
        ("append 1 item, 1 connection", append, raw_push, 1),
        (f"put, {TASKS} tasks", put, raw_put, TASKS),
        (f"append, {TASKS} tasks", append, raw_push, TASKS),
    ]
    return [(name, *await _rates(mine, raw, tasks)) for name, mine, raw, tasks in plan]


def _table(title: str, raw_name: str, rows: list[Row]) -> list[str]:
    lines = [
        f"**{title}** (raw: {raw_name})",
        "",
        "| operation | store ops/s | raw ops/s | store / raw (median of rounds) |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {name} | {store:,.0f} | {raw:,.0f} | {ratio:.2f}x |" for name, store, raw, ratio in rows]
    return [*lines, ""]


async def _run() -> str:
    pg = await _bench_pg()
    rd = await _bench_redis()
    put_pg, put_rd, append_rd = pg[0][3], rd[0][3], rd[2][3]
    lines = [
        "## PostgreSQL and Redis state stores",
        "",
        f"Each pair: {SECONDS:.1f} s each of store and raw calls, alternating in {ROUNDS} rounds, from one asyncio "
        f"process; 50 keys per task, "
        f"{len(VALUE)}-byte values. Ratios matter more than absolutes (2-core machine, shared).",
        "",
        *_table("PostgreSQL", "psycopg upsert of the same row shape / one-row insert for append", pg),
        *_table("Redis", "Lua CAS script on a hash / RPUSH for append, HMGET for get", rd),
        f"Targets (store put >= 0.7x raw): PostgreSQL {put_pg:.2f}x {'met' if put_pg >= 0.7 else 'MISSED'}, "
        f"Redis {put_rd:.2f}x {'met' if put_rd >= 0.7 else 'MISSED'}. "
        f"Redis append (1 connection) >= 0.8x RPUSH: {append_rd:.2f}x {'met' if append_rd >= 0.8 else 'MISSED'}.",
        "",
        "The last two Redis rows set the store's append against what any script-kept append costs: an RPUSH "
        "sent through a script, and the three commands an append that keeps a version must run (read the "
        "header, push, write the header) with none of the store's checks, its key index or its offsets. "
        "The store's append runs those three plus the RPUSH of the item's offset, its checks, and "
        "keepstate's Python around the call.",
        "",
    ]
    return "\n".join(lines)


def run() -> str:
    """The Markdown section ``## PostgreSQL and Redis state stores``."""
    return asyncio.run(_run())


if __name__ == "__main__":
    print(run())
