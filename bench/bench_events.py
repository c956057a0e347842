"""Benchmark: run events over HTTP, from a worker's emit to a reader of the run's Server-Sent Events.

Everything goes through real ``keepstate serve`` processes, as a worker and a browser would reach
them; the figures are compared with a state write measured on the same server in the same run:

- **Seen after written** (SQLite, PostgreSQL): one event emitted at a time (``POST
  /v0/invocations/{id}/events``), timed from just before the POST until an SSE reader of ``GET
  /v0/runs/{id}/events`` in the same process has it; each emit alternates with a ``PUT`` of a small
  state value (a write's round trip). p50 and p99 of each, and their ratios.
- **Across two servers** on one PostgreSQL: the same, emitted through one server and read through
  the other (target: p99 at most ``CROSS_TARGET_MS``).
- **Emit throughput**: the same items emitted as events and appended to a state list of the same
  run (``POST /v0/state/run/{key}/append``), one item per call from ``CONCURRENCY`` callers and
  ``BATCH`` items per call from one, alternating round by round, each round on a fresh run (a run
  holds at most 10,000 events); target: emit at least ``THROUGHPUT_TARGET`` of append.
- **1,000 open streams** on one server: its RSS before and after opening them (per stream), and the
  CPU seconds the server spends over ``IDLE_WINDOW_S`` with all of them open and nothing written,
  against the same window with none open (target: near zero).

Short on purpose: a few seconds a store, on a machine shared with other work. ``python -m bench
events`` runs it alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx

from .bench_sessions import fresh_url
from .timing import table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from keepstate.platform.run_events import KEEPALIVE_ENV, KEEPALIVE_S
from serverproc import ServerInfo, running_server

SAMPLES = 200
"""Events timed from emit to a reader (each paired with a state write)."""
PAUSE_S = 0.002
"""Between two samples: the reader is idle when the next event is written, as a live stream is."""
CROSS_TARGET_MS = 250.0
CONCURRENCY = 8
BATCH = 100
SHAPES = {
    f"1 item per call, {CONCURRENCY} runs at once": (CONCURRENCY, 100, 1),
    f"{BATCH} items per call, 1 run": (1, 80, BATCH),
}
"""Throughput rounds: (runs written at once, each by its own caller; calls per run; items per call)."""
ROUNDS = 5
THROUGHPUT_TARGET = 0.8
STREAMS = 1000
WARM_STREAMS = 20
"""Opened (and kept) before the RSS is first read, so the first stream's one-off allocations are not
counted per stream."""
IDLE_WINDOW_S = 5.0
IDLE_KEEPALIVE_S = 2.5
"""The idle streams' server sends its keep-alives this often (``KEEPALIVE_S``, 15 s, by default), so
that the window holds two of each stream's: their cost is measured, then scaled to the default."""
RUN_TOKEN = "x-agentos-run-token"
ITEM = {"role": "assistant", "content": "a token or two of a reply being written"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@dataclass
class Claimed:
    """A run started and claimed for a worker: what emits and run-scope state writes need."""

    run: str
    invocation: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {RUN_TOKEN: self.token}


async def claimed(http: httpx.AsyncClient, admin: str, agent: str = "bench") -> Claimed:
    run = (await http.post("/v0/runs", json={"agent": agent}, headers=bearer(admin))).json()
    answer = await http.post("/v0/invocations/claim", json={"agents": [agent], "wait": 5}, headers=bearer(admin))
    answer.raise_for_status()
    found = answer.json()
    assert found["run_id"] == run["id"], found
    return Claimed(run["id"], found["id"], found["token"])


async def emit(http: httpx.AsyncClient, run: Claimed, items: Sequence[object]) -> int:
    events = [{"type": "message", "data": item} for item in items]
    answer = await http.post(f"/v0/invocations/{run.invocation}/events", json={"events": events}, headers=run.headers)
    answer.raise_for_status()
    seq: int = answer.json()["seq"]
    return seq


async def append(http: httpx.AsyncClient, run: Claimed, key: str, items: Sequence[object]) -> None:
    answer = await http.post(f"/v0/state/run/{key}/append", json={"items": items}, headers=run.headers)
    answer.raise_for_status()


# ---------------------------------------------------------------- seen after written


@dataclass
class Reader:
    """An SSE reader of one run: when each event's ``id`` arrived (perf_counter), and a wake-up."""

    seen: dict[int, float] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self, http: httpx.AsyncClient, run: str, admin: str, ready: asyncio.Event) -> None:
        headers = {**bearer(admin), "Accept": "text/event-stream"}
        async with http.stream("GET", f"/v0/runs/{run}/events", headers=headers) as answer:
            answer.raise_for_status()
            ready.set()
            async for line in answer.aiter_lines():
                if line.startswith("id:"):
                    self.seen[int(line[3:].strip())] = time.perf_counter()
                    self.arrived.set()

    async def wait_for(self, seq: int) -> float:
        while seq not in self.seen:
            self.arrived.clear()
            if seq in self.seen:
                break
            await asyncio.wait_for(self.arrived.wait(), 10)
        return self.seen[seq]


async def seen_after_written(write_url: str, read_url: str, admin: str) -> tuple[list[float], list[float]]:
    """``SAMPLES`` events emitted through ``write_url`` and read from ``read_url``: each one's time from
    emit to the reader, and a state PUT's round trip on ``write_url`` after each (seconds)."""
    limits = httpx.Limits(max_keepalive_connections=4)
    async with (
        httpx.AsyncClient(base_url=write_url, timeout=30, limits=limits) as writer,
        httpx.AsyncClient(base_url=read_url, timeout=None) as reading,
    ):
        run = await claimed(writer, admin)
        reader, ready = Reader(), asyncio.Event()
        task = asyncio.create_task(reader.read(reading, run.run, admin, ready))
        await asyncio.wait_for(ready.wait(), 10)
        latencies, writes = [], []
        try:
            for n in range(SAMPLES + 5):  # the first five warm both paths up
                started = time.perf_counter()
                seq = await emit(writer, run, [{"n": n}])
                latency = await reader.wait_for(seq) - started
                started = time.perf_counter()
                answer = await writer.put("/v0/state/run/last", json={"value": {"n": n}}, headers=run.headers)
                answer.raise_for_status()
                if n >= 5:
                    latencies.append(latency)
                    writes.append(time.perf_counter() - started)
                await asyncio.sleep(PAUSE_S)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task
    return latencies, writes


# ---------------------------------------------------------------- throughput


async def timed(callers: Sequence[Sequence[Callable[[], Awaitable[object]]]]) -> float:
    """Seconds for every caller to make its calls, one after another, the callers all at once."""

    async def one(calls: Sequence[Callable[[], Awaitable[object]]]) -> None:
        for call in calls:
            await call()

    started = time.perf_counter()
    await asyncio.gather(*(one(calls) for calls in callers))
    return time.perf_counter() - started


async def throughput(url: str, admin: str) -> dict[str, tuple[float, float, float]]:
    """Items per second emitted and appended, in each of ``SHAPES``: the medians over ``ROUNDS``
    rounds (emit first in one, append first in the next), and the median of the rounds' ratios."""
    found = {}
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        for label, (runs, calls, per_call) in SHAPES.items():
            rates: list[tuple[float, float]] = []
            for round_ in range(ROUNDS + 1):  # the first round warms up
                each = [await claimed(http, admin) for _ in range(runs)]
                items = [ITEM] * per_call
                emits = [[partial(emit, http, run, items)] * calls for run in each]
                appends = [[partial(append, http, run, "copy", items)] * calls for run in each]
                if round_ % 2:
                    appended, emitted = await timed(appends), await timed(emits)
                else:
                    emitted, appended = await timed(emits), await timed(appends)
                total = runs * calls * per_call
                rates.append((total / emitted, total / appended))
            rates = rates[1:]
            found[label] = (
                statistics.median(e for e, _ in rates),
                statistics.median(a for _, a in rates),
                statistics.median(e / a for e, a in rates),
            )
    return found


# ---------------------------------------------------------------- idle streams


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def open_streams(url: str, admin: str, runs: list[str]) -> AsyncIterator[list[asyncio.StreamWriter]]:
    """One SSE stream per run, each a bare connection whose answer's head has been read (200)."""
    host, port = url.removeprefix("http://").split(":")
    writers: list[asyncio.StreamWriter] = []

    async def one(run: str) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        writers.append(writer)
        head = (
            f"GET /v0/runs/{run}/events HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {admin}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        )
        writer.write(head.encode())
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]

    try:
        for start in range(0, len(runs), 100):
            await asyncio.gather(*(one(run) for run in runs[start : start + 100]))
        yield writers
    finally:
        for writer in writers:
            writer.close()


async def idle_window(pid: int) -> float:
    before = cpu_seconds(pid)
    await asyncio.sleep(IDLE_WINDOW_S)
    return cpu_seconds(pid) - before


async def idle_streams(server: ServerInfo) -> dict[str, float]:
    """The server's RSS per open stream and its CPU seconds over an idle window, with ``STREAMS`` open."""
    pid = server.process.pid
    runs: list[str] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        while len(runs) < WARM_STREAMS + STREAMS:
            made = await asyncio.gather(
                *(http.post("/v0/runs", json={"agent": "idle"}, headers=bearer(server.admin_key)) for _ in range(100))
            )
            runs += [answer.json()["id"] for answer in made]
    await asyncio.sleep(0.5)
    none_open = await idle_window(pid)
    async with open_streams(server.url, server.admin_key, runs[:WARM_STREAMS]):
        await asyncio.sleep(0.5)
        before = rss_bytes(pid)
        async with open_streams(server.url, server.admin_key, runs[WARM_STREAMS : WARM_STREAMS + STREAMS]):
            await asyncio.sleep(1.0)
            after = rss_bytes(pid)
            all_open = await idle_window(pid)
    return {"per_stream_kib": (after - before) / STREAMS / 1024, "open_cpu_s": all_open, "none_cpu_s": none_open}


# ---------------------------------------------------------------- the run


@contextlib.asynccontextmanager
async def servers(backend: str, count: int, env: dict[str, str] | None = None) -> AsyncIterator[list[ServerInfo]]:
    """``count`` servers sharing a fresh store of ``backend``."""
    async with fresh_url(backend) as url:
        with ExitStack() as stack:
            admin = f"ks_bench_{os.urandom(12).hex()}"
            yield [
                stack.enter_context(running_server(url, admin_key=admin, lease=3600, extra_env=env))
                for _ in range(count)
            ]


@dataclass
class Figures:
    latency: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    throughput: dict[str, dict[str, tuple[float, float, float]]] = field(default_factory=dict)
    idle: dict[str, dict[str, float]] = field(default_factory=dict)


async def _all() -> Figures:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))  # the servers inherit it
    figures = Figures()
    for backend in ("sqlite", "postgres"):
        async with servers(backend, 2 if backend == "postgres" else 1) as up:
            first = up[0]
            figures.latency[backend] = await seen_after_written(first.url, first.url, first.admin_key)
            if len(up) > 1:
                figures.latency["postgres, two servers"] = await seen_after_written(
                    first.url, up[1].url, first.admin_key
                )
            figures.throughput[backend] = await throughput(first.url, first.admin_key)
        async with servers(backend, 1, {KEEPALIVE_ENV: str(IDLE_KEEPALIVE_S)}) as (idle,):
            figures.idle[backend] = await idle_streams(idle)
    return figures


THROUGHPUT_READING = (
    "Where an emit costs more than an append of the same items: its events are one row of `ks_run_events` "
    "(schema step 10: their data one after another, their sizes and types beside it), as a list packs its "
    "items into segments; what is left is the route (an emit goes through Starlette's router and middleware, "
    "a state write does not) and the events' own shape (each item inside a `{type, data}` object: a bigger "
    "body to write, parse and check). On PostgreSQL an emit is one call of `ks_emit` (the run's head locked, "
    "the invocation judged live in a statement of its own, then the head moved and the row written) where an "
    "append is one statement. These rounds are short on a machine shared with other work: the ratios move "
    "by 0.1-0.3 from one run to the next."
)
LATENCY_HEADER = ("store", "emit → seen p50 ms", "p99 ms", "state PUT p50 ms", "p99 ms", "seen / PUT p50", "p99")
IDLE_HEADER = (
    "store",
    "RSS per stream KiB",
    f"server CPU s in {IDLE_WINDOW_S:.0f} s, none open",
    f"{STREAMS:,} open, keep-alive every {IDLE_KEEPALIVE_S} s",
    f"{STREAMS:,} open, at the default {KEEPALIVE_S:.0f} s (scaled)",
)
THROUGHPUT_HEADER = ("store", "shape", "emit items/s", "append items/s", "emit / append")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _report(figures: Figures) -> str:
    latency_rows: list[tuple[object, ...]] = []
    for label, (seen, writes) in figures.latency.items():
        p50, p99 = percentile(seen, 0.5), percentile(seen, 0.99)
        w50, w99 = percentile(writes, 0.5), percentile(writes, 0.99)
        latency_rows.append((label, ms(p50), ms(p99), ms(w50), ms(w99), f"{p50 / w50:.2f}x", f"{p99 / w99:.2f}x"))
    cross = percentile(figures.latency["postgres, two servers"][0], 0.99) * 1000
    throughput_rows: list[tuple[object, ...]] = []
    worst = float("inf")
    for backend, shapes in figures.throughput.items():
        for label, (emitted, appended, ratio) in shapes.items():
            throughput_rows.append((backend, label, f"{emitted:,.0f}", f"{appended:,.0f}", f"{ratio:.2f}x"))
            worst = min(worst, ratio)
    idle_rows: list[tuple[object, ...]] = []
    for backend, found in figures.idle.items():
        none, open_ = found["none_cpu_s"], found["open_cpu_s"]
        scaled = none + max(0.0, open_ - none) * IDLE_KEEPALIVE_S / KEEPALIVE_S
        idle_rows.append((backend, f"{found['per_stream_kib']:.1f}", f"{none:.2f}", f"{open_:.2f}", f"{scaled:.3f}"))

    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"

    return (
        "## Run events\n\n"
        "Real `keepstate serve` processes; the client (one asyncio process, httpx) emits as a worker does "
        "(`POST /v0/invocations/{id}/events`, one event per call) and reads `GET /v0/runs/{id}/events` as "
        f"Server-Sent Events. {SAMPLES} events, one at a time, each timed from just before its POST until the "
        "reader has it, each followed by a `PUT` of a small run-scope state value on the server written to "
        "(its round trip, for scale).\n\n"
        f"{table(LATENCY_HEADER, latency_rows)}\n\n"
        f"Across two servers on one PostgreSQL (emitted through one, read through the other): p99 {cross:.1f} ms, "
        f"target <= {CROSS_TARGET_MS:.0f} ms: {verdict(cross <= CROSS_TARGET_MS)}.\n\n"
        "### Emit throughput against append\n\n"
        "The same items (a ~60-byte JSON object each) emitted as events of a run and appended to a list in "
        f"that run's state (`POST /v0/state/run/copy/append`, the run token), {ROUNDS} rounds after one of warm-up, "
        "emit first in one round and append first in the next, every round on fresh runs: "
        + "; ".join(f"{label} ({runs * calls * per_call:,} items)" for label, (runs, calls, per_call) in SHAPES.items())
        + ". Items per second, medians; the ratio is the median of the rounds'.\n\n"
        f"{table(THROUGHPUT_HEADER, throughput_rows)}\n\n"
        f"Target (emit >= {THROUGHPUT_TARGET}x append): worst {worst:.2f}x: {verdict(worst >= THROUGHPUT_TARGET)}.\n\n"
        f"{THROUGHPUT_READING}\n\n"
        f"### {STREAMS:,} open streams on one server\n\n"
        f"{STREAMS:,} SSE streams of {STREAMS:,} queued runs (one reader each, bare keep-alive connections) on a "
        f"server of their own, opened after {WARM_STREAMS} others: the server's RSS growth per stream, and the CPU "
        f"seconds the server process used in {IDLE_WINDOW_S:.0f} s with none open and with all of them open and "
        f"nothing written. That server sends keep-alives every {IDLE_KEEPALIVE_S} s instead of {KEEPALIVE_S:.0f} s, "
        "so the window holds two of each stream's; the last column scales their cost to the default. CPU time is "
        f"counted in ticks of {1000 / os.sysconf('SC_CLK_TCK'):.0f} ms.\n\n"
        f"{table(IDLE_HEADER, idle_rows)}\n"
    )


def run() -> str:
    return _report(asyncio.run(_all()))


if __name__ == "__main__":
    print(run())
