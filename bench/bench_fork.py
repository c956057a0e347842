"""Benchmark: forking a session that holds a ~1 MiB list, against reading that list once.

A fork copies every agent's session-scope state in one transaction (``Database.fork_session``); on
SQLite and PostgreSQL the copy is ``INSERT … SELECT`` of the list's header and segment rows, so it
should cost about what reading the list costs, not what rebuilding it would (target: at most 3x a
``get`` of the list). Each round times one fork and one ``get`` of the source's list, alternating, from
the same in-process ``Platform``; the figure is the median of the per-round ratios. A second row cuts
the list to its first half in the fork (``lists``): a read of that half and a rewrite as one value.
On SQLite a last row copies the same segment rows with nothing else, durably, on a connection of its
own: the floor of any copy (a fork can only beat it by sharing rows, which keepstate does not).
``python -m bench fork`` runs it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import time

import orjson

from keepstate.clock import now_ms
from keepstate.platform import Platform, open_platform
from keepstate.stores.records import StoredSession, namespace

from .bench_sessions import fresh_url
from .timing import table

ROUNDS = 15
ITEMS = 8_000
"""Items of ~130 bytes as JSON: a list of just under 1 MiB (the most a list may hold)."""
TARGET = 3.0
SEGMENT_COLUMNS = "key, start, items, sizes, bytes FROM keepstate_kv_segments"


def _items() -> list[bytes]:
    return [orjson.dumps({"role": "user", "n": n, "content": "x" * 90}) for n in range(ITEMS)]


async def _measure(url: str) -> list[tuple[str, float, float, float]]:
    platform = await open_platform(url)
    try:
        source, _ = await platform.repo.create_session(StoredSession("default", "s", "k", None, b"{}", now_ms()))
        assert await platform.repo.add_session_agent(source, "chat")
        ns = namespace("default", "session", "chat", "s")
        items = _items()
        for start in range(0, ITEMS, 500):
            await platform.state.append(ns, "history", items[start : start + 500])
        entry = await platform.state.get(ns, "history")
        assert entry is not None and len(entry.data) > 1_000_000
        rows = []
        for label, cuts in (("fork", {}), ("fork, the list cut to half", {("chat", "history"): ITEMS // 2})):
            forks, reads = [], []
            for n in range(ROUNDS):
                fork = StoredSession("default", f"f-{label[:6]}-{n}", "k", None, b"{}", now_ms(), parent="s")
                started = time.perf_counter()
                assert await platform.database.fork_session(source, fork, cuts) is not None
                forks.append(time.perf_counter() - started)
                started = time.perf_counter()
                await platform.state.get(ns, "history")
                reads.append(time.perf_counter() - started)
            rows.append(_row(label, forks, reads))
        if url.startswith("sqlite"):
            rows.append(await _sqlite_floor(platform, url, ns))
        return rows
    finally:
        await platform.aclose()


def _row(label: str, forks: list[float], reads: list[float]) -> tuple[str, float, float, float]:
    ratio = statistics.median(f / r for f, r in zip(forks, reads, strict=True))
    return label, statistics.median(forks) * 1000, statistics.median(reads) * 1000, ratio


async def _sqlite_floor(platform: Platform, url: str, ns: str) -> tuple[str, float, float, float]:
    """The least a durable copy of the list costs on SQLite: its segment rows copied by one ``INSERT …
    SELECT`` in one transaction on a connection of its own, ``synchronous=FULL`` as the store's."""
    conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    conn.execute("PRAGMA synchronous=FULL")
    copies, reads = [], []
    try:
        for n in range(ROUNDS):
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"INSERT INTO keepstate_kv_segments SELECT 'floor-{n}', {SEGMENT_COLUMNS} WHERE ns = ?", (ns,))
            conn.execute("COMMIT")
            copies.append(time.perf_counter() - started)
            started = time.perf_counter()
            await platform.state.get(ns, "history")
            reads.append(time.perf_counter() - started)
    finally:
        conn.close()
    return _row("raw floor: the segment rows copied in one transaction", copies, reads)


async def _all() -> str:
    rows: list[tuple[object, ...]] = []
    whole: list[float] = []
    for backend in ("sqlite", "postgres"):
        async with fresh_url(backend) as url:
            for label, fork_ms, read_ms, ratio in await _measure(url):
                rows.append((backend, label, f"{fork_ms:.1f}", f"{read_ms:.1f}", f"{ratio:.2f}x"))
                whole += [ratio] if label == "fork" else []
    worst = max(whole)
    verdict = "met" if worst <= TARGET else "MISSED"
    return (
        "## Session fork\n\n"
        f"A session holding one list of {ITEMS:,} items (~1 MiB as JSON), forked whole and with the list cut to "
        f"half, against a `get` of that list, alternating in {ROUNDS} rounds from one in-process `Platform`; "
        "every fork adds a copy to the store.\n\n"
        f"{table(('store', 'operation', 'fork ms', 'read ms', 'fork / read (median of rounds)'), rows)}\n\n"
        f"Target (a whole fork <= {TARGET:.0f}x one read of the list): {worst:.2f}x {verdict}.\n"
    )


def run() -> str:
    return asyncio.run(_all())
