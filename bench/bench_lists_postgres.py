"""Lists and store-side writes: what a part of a list costs against the list's length, and ``incr``
against the raw driver's one-statement upsert-increment.

PostgreSQL's section (``bench_lists_sqlite`` and ``bench_lists_redis`` measure the others the way
their engines call for). Every figure is a ratio of two things measured in the same run, in alternating
rounds (so load from elsewhere on the machine hits both alike): the median of the rounds' ratios.
Targets: a part of a ~1 MiB list built by appends costs ≤ 1.2× the same part of a 20-item list;
``incr`` ≥ 0.8× the raw upsert-increment. ``python -m bench lists_postgres`` runs it.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from keepstate.errors import TooLarge
from keepstate.stores import open_database
from keepstate.stores.base import StateFacet

from .bench_scaleout import throwaway_schema

ROUNDS = 9
PER_ROUND = 300
TASKS = 8
NS = "bench/session/lists/s"
MESSAGE = orjson.dumps({"role": "assistant", "content": "a reply of some hundred and fifty bytes: " + "x" * 96})

Call = Callable[[int], Awaitable[object]]
Row = tuple[str, str, str, float, float]
"""(backend, case, against, ratio, target): ratio is ours / baseline in time (cost) or in ops/s (speed)."""


async def _seconds(call: Call, count: int, tasks: int) -> float:
    """Seconds ``tasks`` concurrent loops take to make ``count`` calls between them."""
    started = time.perf_counter()
    await asyncio.gather(*(_loop(call, task, count // tasks, tasks) for task in range(tasks)))
    return time.perf_counter() - started


async def _loop(call: Call, task: int, count: int, tasks: int) -> None:
    for index in range(count):
        await call(index * tasks + task)


async def alternating(ours: Call, baseline: Call, tasks: int = 1) -> float:
    """The median over ROUNDS of (our seconds / the baseline's seconds) for PER_ROUND calls each."""
    await _seconds(ours, tasks * 10, tasks)  # warm up: statements prepared, pool grown
    await _seconds(baseline, tasks * 10, tasks)
    ratios = []
    for _ in range(ROUNDS):
        mine = await _seconds(ours, PER_ROUND, tasks)
        theirs = await _seconds(baseline, PER_ROUND, tasks)
        ratios.append(mine / theirs)
    return statistics.median(ratios)


async def build_long(state: StateFacet, key: str) -> int:
    """A list of one message per append, up to the 1 MiB limit; its length."""
    length = 0
    while True:
        try:
            _, length = await state.append(NS, key, [MESSAGE])
        except TooLarge:
            return length


async def _part_rows(state: StateFacet, backend: str) -> list[Row]:
    """Parts of a ~1 MiB list built by appends against the same parts of a 20-item list."""
    length = await build_long(state, "long")
    await state.append(NS, "short", [MESSAGE] * 20)
    middle = length // 2
    tail = await alternating(lambda _: state.tail(NS, "long", 20), lambda _: state.tail(NS, "short", 20))
    items = await alternating(lambda _: state.items(NS, "long", middle, 20), lambda _: state.items(NS, "short", 0, 20))

    async def pop_and_back(key: str) -> None:
        popped = await state.pop(NS, key)
        assert popped is not None
        await state.append(NS, key, [popped[0]])

    pop = await alternating(lambda _: pop_and_back("long"), lambda _: pop_and_back("short"))
    against = "the same on a 20-item list (time)"
    return [
        (backend, f"tail 20 of a {length}-item (~1 MiB) list", against, tail, 1.2),
        (backend, f"items {middle}…{middle + 19} of it", against, items, 1.2),
        (backend, "pop the last item and append it back", against, pop, 1.2),
    ]


# ---------------------------------------------------------------- PostgreSQL

PG_RAW_TABLE = """CREATE TABLE raw_counters (ns TEXT COLLATE "C", key TEXT COLLATE "C", n BIGINT NOT NULL,
    PRIMARY KEY (ns, key))"""
PG_RAW_INCR = """INSERT INTO raw_counters AS c (ns, key, n) VALUES (%s, %s, 1)
    ON CONFLICT (ns, key) DO UPDATE SET n = c.n + 1 RETURNING n"""


async def _postgres_rows() -> list[Row]:
    with throwaway_schema() as url:
        return await _postgres_rows_at(url)


async def _postgres_rows_at(url: str) -> list[Row]:
    """The PostgreSQL rows, on the store (a schema of its own) at ``url``."""
    import psycopg

    from keepstate.stores.postgres.db import aconnection
    from keepstate.stores.postgres.state import PostgresState

    database = open_database(url)
    raws: list[psycopg.AsyncConnection[Any]] = []
    try:
        state = await database.state()
        assert isinstance(state, PostgresState)
        raws = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(TASKS)]
        await raws[0].execute(PG_RAW_TABLE)
        rows = await _part_rows(state, "PostgreSQL")

        def raw_incr(tasks: int) -> Call:
            async def call(index: int) -> object:
                cursor = await raws[index % tasks].execute(PG_RAW_INCR, (NS, f"c{index % 50}"))
                return await cursor.fetchone()

            return call

        async def pooled_raw_incr(index: int) -> object:
            async with aconnection(state.pool) as conn:
                return await (await conn.execute(PG_RAW_INCR, (NS, f"c{index % 50}"))).fetchone()

        async def incr(index: int) -> object:
            return await state.incr(NS, f"c{index % 50}", 1)

        for tasks in (1, TASKS):
            name = f"incr, {tasks} task{'s' if tasks > 1 else ''}"
            slowdown = await alternating(incr, raw_incr(tasks), tasks)
            rows.append(
                ("PostgreSQL", name, "raw upsert-increment, psycopg async, own connections (speed)", 1 / slowdown, 0.8)
            )
            slowdown = await alternating(incr, pooled_raw_incr, tasks)
            rows.append(
                ("PostgreSQL", name, "the same raw statement through keepstate's pool (speed)", 1 / slowdown, 0.8)
            )
        return rows
    finally:
        await database.aclose()
        for raw in raws:
            await raw.close()


# ---------------------------------------------------------------- the report


def _verdict(case: str, ratio: float, target: float) -> str:
    speed = case.startswith("incr")
    met = ratio >= target if speed else ratio <= target
    return f"{'≥' if speed else '≤'} {target:.2f}×: {'met' if met else 'MISSED'}"


def run() -> str:
    rows = asyncio.run(_postgres_rows())
    lines = [
        "## Lists and store-side writes: PostgreSQL",
        "",
        f"Alternating rounds ({ROUNDS} × {PER_ROUND} calls a side), median of the rounds' ratios, one asyncio "
        f"process; ~150-byte messages. The machine has 2 cores shared with other work: ratios are noisy.",
        "",
        "| backend | case | against | ratio | target |",
        "| --- | --- | --- | ---: | --- |",
    ]
    lines += [
        f"| {backend} | {case} | {against} | {ratio:.2f}× | {_verdict(case, ratio, target)} |"
        for backend, case, against, ratio, target in rows
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
