"""The embedded store against raw sqlite3 doing the same write with the same durability.

Both sides use WAL and ``synchronous=FULL`` (one fsync per commit), so the ratio is the cost of
keepstate's validation, encoding, versioning and transaction, not of a weaker setting.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import time
from pathlib import Path

import orjson

import keepstate
from keepstate.stores import open_database

from .timing import ops_per_second, paired, table

VALUE = {"role": "assistant", "content": "turn 12: you said 'hello there'", "n": 12}
RAW_SCHEMA = (
    "CREATE TABLE kv (ns TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL, value BLOB, PRIMARY KEY (ns, key))"
)
RAW_UPSERT = (
    "INSERT INTO kv (ns, key, version, value) VALUES (?, ?, 1, ?) "
    "ON CONFLICT (ns, key) DO UPDATE SET version = version + 1, value = excluded.value RETURNING version"
)


def _raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(RAW_SCHEMA)
    return conn


def _point_ops(folder: Path) -> list[tuple[object, ...]]:
    raw = _raw(folder / "raw.db")
    store = keepstate.open(f"sqlite:///{folder / 'store.db'}")
    scope = store.scope("session", agent="bench", id="s")
    memory = keepstate.open("memory://").scope("session", agent="bench", id="s")
    data = orjson.dumps(VALUE)
    raw_put, put, put_ratio = paired(
        lambda i: raw.execute(RAW_UPSERT, ("ns", f"k{i % 100}", data)).fetchone(),
        lambda i: scope.put(f"k{i % 100}", VALUE),
        1000,
    )
    raw_get, get, get_ratio = paired(
        lambda i: orjson.loads(
            raw.execute("SELECT value FROM kv WHERE ns = ? AND key = ?", ("ns", f"k{i % 100}")).fetchone()[0]
        ),
        lambda i: scope.get(f"k{i % 100}"),
        20000,
    )
    mem_put = ops_per_second(lambda i: memory.put(f"k{i % 100}", VALUE), 20000)
    store.close()
    raw.close()
    return [
        ("put (upsert, FULL)", raw_put, put, put_ratio),
        ("get", raw_get, get, get_ratio),
        ("put, memory:// store", raw_put, mem_put, mem_put / raw_put),
    ]


def _append_cost(folder: Path) -> list[tuple[object, ...]]:
    """Seconds per append of one small item at a short list and at a ~1 MiB list."""
    store = keepstate.open(f"sqlite:///{folder / 'append.db'}")
    scope = store.scope("session", agent="bench", id="s")
    item = {"role": "user", "content": "x" * 80}
    scope.append("short", [item] * 10)
    while len(orjson.dumps(scope.get("long"))) < 950_000:  # room left for the 450 timed appends
        scope.append("long", [item] * 100)
    short = 1 / ops_per_second(lambda _: scope.append("short", [item]), 150)
    long = 1 / ops_per_second(lambda _: scope.append("long", [item]), 150)
    size = len(orjson.dumps(scope.get("long")))
    store.close()
    naive = _naive_rewrite_cost(folder, size)
    return [
        ("append to a 10-item list", f"{short * 1e6:.0f} µs", "1.00"),
        (f"append to a {size / 1048576:.2f} MiB list", f"{long * 1e6:.0f} µs", f"{long / short:.2f}"),
        (
            "naive read-modify-write of the same 1 MiB JSON (raw sqlite3)",
            f"{naive * 1e6:.0f} µs",
            f"{naive / short:.2f}",
        ),
    ]


def _naive_rewrite_cost(folder: Path, size: int) -> float:
    raw = _raw(folder / "naive.db")
    items = [{"role": "user", "content": "x" * 80}] * (size // 100)
    raw.execute(RAW_UPSERT, ("ns", "h", orjson.dumps(items)))

    def rewrite(_: int) -> None:
        value = orjson.loads(raw.execute("SELECT value FROM kv WHERE key = 'h'").fetchone()[0])
        value.append({"role": "user", "content": "x" * 80})
        raw.execute(RAW_UPSERT, ("ns", "h", orjson.dumps(value)))

    cost = 1 / ops_per_second(rewrite, 50)
    raw.close()
    return cost


async def _group_commit(url: str, tasks: int, per_task: int) -> float:
    database = open_database(url)
    backend = await database.state()
    ns = "default/session/bench/s"
    data = orjson.dumps(VALUE)

    async def writer(task: int) -> None:
        for index in range(per_task):
            await backend.put(ns, f"t{task}-{index % 10}", data)

    started = time.perf_counter()
    await asyncio.gather(*(writer(task) for task in range(tasks)))
    elapsed = time.perf_counter() - started
    await database.aclose()
    return tasks * per_task / elapsed


def run() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        point = _point_ops(folder)
        appends = _append_cost(folder)
        grouped = asyncio.run(_group_commit(f"sqlite:///{folder / 'group.db'}", 64, 60))
    raw_put = float(point[0][1])  # type: ignore[arg-type]
    point.append(("put, async face, 64 concurrent writers (group commit)", raw_put, grouped, grouped / raw_put))
    return "\n\n".join(
        [
            "## Embedded store (SQLite) vs raw sqlite3",
            "WAL and `synchronous=FULL` on both sides; raw and keepstate alternate in 5 rounds: median ops/s, "
            "and the median of the rounds' ratios. Target: put ≥ 0.8× raw.",
            table(("operation", "raw sqlite3 ops/s", "keepstate ops/s", "ratio"), point),
            "### Append cost against list length",
            "One small item appended; target: at ~1 MiB ≤ 1.5× the short list.",
            table(("case", "time per append", "× short list"), appends),
        ]
    )
