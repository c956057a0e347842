"""Benchmark: session ``transact`` round trips against the backend's raw write, per backend.

A transact round trip is what a runtime turn costs the store: grant the lease, read the state,
write it back fenced, release the lease (4 round trips on a network backend). The raw write is
the same backend's plain ``set`` outside any lease (one atomic statement / script). Both are
measured in the same run, for one session (sequential calls) and for 16 sessions in parallel
(16 asyncio tasks, each on its own session), so the ratios are what to compare.
Throwaway schema / key prefix / file, removed afterwards. ``python bench/bench_sessions.py`` prints it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

from keepstate.sessions import SessionState, SessionStore, open_session_store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from serverproc import reachable

PG_URL = os.environ.get("KEEPSTATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("KEEPSTATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
SECONDS = 1.2  # per measurement
PARALLEL = 16


@asynccontextmanager
async def fresh_url(backend: str) -> AsyncIterator[str]:
    """A fresh store URL for ``backend``, cleaned up afterwards."""
    if backend == "memory":
        yield f"memory://bench-{uuid.uuid4().hex}"
    elif backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{Path(tmp) / 'sessions.db'}"
    elif backend == "postgres":
        import psycopg

        schema = f"bench_sessions_{uuid.uuid4().hex[:8]}"
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as admin:
            await admin.execute(f"CREATE SCHEMA {schema}")
            try:
                yield f"{PG_URL}{'&' if '?' in PG_URL else '?'}options={quote(f'-csearch_path={schema}')}"
            finally:
                await admin.execute(f"DROP SCHEMA {schema} CASCADE")
    else:
        import redis.asyncio as aioredis

        prefix = f"bench-sessions:{uuid.uuid4().hex[:8]}:"
        try:
            yield f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}prefix={prefix}"
        finally:
            client = aioredis.Redis.from_url(REDIS_URL)
            async for key in client.scan_iter(match=prefix + "*", count=1000):
                await client.delete(key)
            await client.aclose()


async def rate(tasks: int, call: Callable[[int], Awaitable[object]], seconds: float = SECONDS) -> float:
    """Calls per second over ``seconds`` with ``tasks`` concurrent loops (task n uses session n)."""
    done = 0
    stop = time.perf_counter() + seconds

    async def loop(n: int) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await call(n)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(n) for n in range(tasks)))
    return done / (time.perf_counter() - started)


async def _measure(store: SessionStore) -> dict[str, float]:
    state = SessionState(state={"step": 1, "items": list(range(20))}, config_hash="bench")
    state.add_message("user", "book a table for two at eight")

    async def raw(n: int) -> None:
        state.state["step"] += 1  # a real change every time (SQLite skips rewriting identical rows cheaply)
        await store.set(f"s-{n}", state)

    async def turn(n: int) -> None:
        sid = f"s-{n}"

        async def operation() -> None:
            current = await store.get(sid) or state
            current.state["step"] += 1
            await store.set(sid, current)

        await store.transact(sid, operation)

    for n in range(PARALLEL):
        await raw(n)  # connect, migrate and create the rows before timing
    return {
        "raw_one": await rate(1, raw),
        "tx_one": await rate(1, turn),
        "raw_many": await rate(PARALLEL, raw),
        "tx_many": await rate(PARALLEL, turn),
    }


async def _all() -> list[tuple[str, dict[str, float] | None]]:
    results: list[tuple[str, dict[str, float] | None]] = []
    for backend in ("memory", "sqlite", "postgres", "redis"):
        if (backend == "postgres" and not reachable(PG_URL, 5432)) or (
            backend == "redis" and not reachable(REDIS_URL, 6379)
        ):
            results.append((backend, None))
            continue
        async with fresh_url(backend) as url:
            store = open_session_store(url, lease_seconds=15, wait_timeout=30)
            try:
                results.append((backend, await _measure(store)))
            finally:
                await store.aclose()
    return results


def run() -> str:
    """The ``## Session store`` Markdown section."""
    rows = []
    for backend, m in asyncio.run(_all()):
        if m is None:
            rows.append(f"| {backend} | not reachable | | | | | |")
            continue
        rows.append(
            f"| {backend} | {m['raw_one']:,.0f} | {m['tx_one']:,.0f} | {m['tx_one'] / m['raw_one']:.2f} "
            f"| {m['raw_many']:,.0f} | {m['tx_many']:,.0f} | {m['tx_many'] / m['raw_many']:.2f} |"
        )
    return "\n".join(
        [
            "## Session store",
            "",
            "`transact` round trips per second (lease grant + get + fenced set + release) against the same",
            f"backend's raw write (plain `set`, one atomic statement/script), one session sequentially and "
            f"{PARALLEL} sessions in parallel (asyncio tasks in one process). SQLite and PostgreSQL writes are",
            "durable (`synchronous=FULL` / WAL flush): a transact pays 3 durable writes (grant, set, release)",
            "to the raw write's one, so ~0.3 is the floor to expect; Redis pays 4 round trips (grant, get, set,",
            "release) to one.",
            "",
            f"| backend | raw write/s (1) | transact/s (1) | ratio | raw write/s ({PARALLEL}) "
            f"| transact/s ({PARALLEL}) | ratio |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    print(run())
