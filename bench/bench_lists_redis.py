"""Benchmark: parts of long lists cost what short ones cost, and ``incr`` costs what a raw increment costs.

``run()`` returns a Markdown section with one table per backend, each made by that backend's own
function (``SECTIONS``). Every row is a ratio measured in the same run, the two sides alternating in
short rounds (``bench_backends._rates``): a list op on a ~1 MiB list built by appends against the
same op on a 20-item list (target ≤ 1.2×), and the store's ``incr`` against the driver's own
one-command increment (target ≥ 0.8×). A throwaway key prefix is used and removed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import orjson
import redis.asyncio as aioredis

from keepstate.stores import open_database
from keepstate.stores.base import StateFacet

from .bench_backends import REDIS_URL, Op, _rates

NS = "bench/session/bench/s"
ITEM = orjson.dumps({"role": "user", "content": "m" * 120})
"""A ~150-byte message."""
LONG_BYTES = 1_000_000
VERSIONED_INCR = """
local version = redis.call('HINCRBY', KEYS[1], 'v', 1)
return {redis.call('HINCRBY', KEYS[1], 'd', ARGV[1]), version}
"""
"""The cheapest script that still keeps a version (no guard, kind, expiry or index): what any
script costs on Redis, to set the engine's cost apart from the script's."""

Row = tuple[str, float, float, float, str]
"""(case, ops/s, baseline ops/s, ratio, target)"""


async def _long_list(store: StateFacet, key: str) -> int:
    """A list of about ``LONG_BYTES`` built by appends of 100 messages; its length."""
    length = 0
    while length * (len(ITEM) + 1) < LONG_BYTES - 100 * (len(ITEM) + 1):
        _, length = await store.append(NS, key, [ITEM] * 100)
    return length


def _pairs(store: StateFacet, length: int) -> list[tuple[str, Op, Op]]:
    """(case, op on the long list, the same op on the short one)."""

    def on(key: str, call: Callable[[str], Awaitable[object]]) -> Op:
        async def op(task: int, i: int) -> object:
            return await call(key)

        return op

    async def churn_trim(key: str) -> object:  # one in, one out: the list keeps its length
        await store.append(NS, key, [ITEM])
        return await store.trim(NS, key, length if key == "long" else 20)

    async def churn_pop(key: str) -> object:
        await store.append(NS, key, [ITEM])
        return await store.pop(NS, key)

    def cases(call: Callable[[str], Awaitable[object]]) -> tuple[Op, Op]:
        return on("long", call), on("short", call)

    return [
        ("tail 20", *cases(lambda key: store.tail(NS, key, 20))),
        ("items 20 from the middle", *cases(lambda key: store.items(NS, key, length // 2 if key == "long" else 0, 20))),
        ("append 1 + trim back to the length", *cases(churn_trim)),
        ("append 1 + pop", *cases(churn_pop)),
    ]


async def _redis() -> tuple[str, list[Row]]:
    prefix = f"ks_bench:{uuid.uuid4().hex[:10]}:"
    database = open_database(f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}prefix={prefix}")
    store = await database.state()
    raw = aioredis.Redis.from_url(REDIS_URL, socket_timeout=5, socket_connect_timeout=3)
    try:
        length = await _long_list(store, "long")
        await store.append(NS, "short", [ITEM] * 20)
        rows: list[Row] = []
        for case, long, short in _pairs(store, length):
            base, mine, ratio = await _rates(short, long)  # ratio: short's rate over long's = long's time over short's
            rows.append((f"{case}: ~1 MiB list ({length} items) vs 20 items", mine, base, ratio, "≤ 1.2×"))

        async def incr(task: int, i: int) -> object:
            return await store.incr(NS, f"c{i % 50}", 1)

        async def raw_incr(task: int, i: int) -> object:
            return await raw.hincrby(f"{prefix}raw:c{i % 50}", "n", 1)

        versioned = raw.register_script(VERSIONED_INCR)

        async def raw_script(task: int, i: int) -> object:
            return await versioned(keys=[f"{prefix}raw:s{i % 50}"], args=[1])

        for name, baseline in (("raw HINCRBY", raw_incr), ("a raw two-HINCRBY script", raw_script)):
            mine, base, ratio = await _rates(incr, baseline)
            rows.append((f"incr vs {name}, 1 connection", mine, base, ratio, "≥ 0.8×"))
        mine, base, ratio = await _rates(raw_script, raw_incr)
        rows.append(("(the two-HINCRBY script vs raw HINCRBY)", mine, base, ratio, "—"))
        return "redis-py asyncio, one connection", rows
    finally:
        await database.aclose()
        async for name in raw.scan_iter(match=prefix + "*", count=1000):
            await raw.delete(name)
        await raw.aclose()


SECTIONS = [("Redis", _redis)]
"""One (title, coroutine function) per backend; each gives its driver's name and its rows."""


def _table(title: str, driver: str, rows: list[Row]) -> list[str]:
    lines = [
        f"**{title}** ({driver})",
        "",
        "| case | ops/s | baseline ops/s | ratio | target |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    lines += [
        f"| {case} | {mine:,.0f} | {base:,.0f} | {ratio:.2f}× | {target} |" for case, mine, base, ratio, target in rows
    ]
    return [*lines, ""]


async def _run() -> str:
    lines = [
        "## Lists and incr: Redis",
        "",
        "Alternating rounds of both sides, one asyncio process; for lists the ratio is time per op on the "
        "long list over time per op on the short one, for incr the store's ops/s over the raw driver's. "
        "2-core machine shared with other work: ratios are noisy, absolutes more so.",
        "",
    ]
    for title, section in SECTIONS:
        lines += _table(title, *await section())
    return "\n".join(lines)


def run() -> str:
    """The Markdown section ``## Lists and incr: Redis``."""
    return asyncio.run(_run())


if __name__ == "__main__":
    print(run())
