"""Prometheus metrics: requests by route template and status, latency histograms, store latency by
operation, store errors, the runs of the store by agent and status, and the event streams open.

Counting is plain Python on the event loop's thread (a dict look-up, a bisect, three additions):
prometheus_client's own ``Counter``/``Histogram`` take a lock per increment and scan the buckets,
which was a measurable share of a state GET. A custom collector turns the counts into the same
metric families at scrape time, in prometheus_client's text format. Each server process has its
own; with ``--workers N`` scrape each or aggregate by instance.

The store's latency is timed by wrapping the facets the server calls (``instrument``): a proxy that
times each coroutine method, made once per method name. The runs by agent and status describe the
whole store, not this process: they are read from it at scrape time (one ``agent_stats`` read) and
kept for ``RUNS_CACHE_S``, so several scrapers, or servers, do not each cost the store a read.
"""

from __future__ import annotations

import bisect
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..clock import now_ms
from ..errors import KeepstateError
from ..platform.service import Platform
from ..platform.upkeep import Upkeep
from ..platform.waiters import Waiters
from ..stores.base import Database, PlatformFacet, StateFacet
from ..stores.records import AgentStats

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
STORE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)
RUNS_CACHE_S = 5.0


class _Series:
    """One labelled series of a histogram: a count, a sum and per-bucket counts."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self, bounds: int = len(BUCKETS)) -> None:
        self.count = 0
        self.total = 0.0
        self.buckets = [0] * (bounds + 1)  # the last one is +Inf

    def cumulative(self, bounds: tuple[float, ...]) -> list[tuple[str, float]]:
        """The buckets as Prometheus wants them: cumulative counts by upper bound, ``+Inf`` last."""
        points, running = [], 0
        for bound, count in zip((*bounds, float("inf")), self.buckets, strict=True):
            running += count
            points.append((_bound(bound), float(running)))
        return points


class RequestCollector:
    """The request counts, exposed as ``keepstate_http_requests`` and ``keepstate_http_request_seconds``."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str, int], _Series] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        found = self.series.get(key)
        if found is None:
            found = self.series[key] = _Series()
        found.count += 1
        found.total += seconds
        found.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "keepstate_http_requests",
            "HTTP requests by route template, method and status",
            labels=["route", "method", "status"],
        )
        latency = HistogramMetricFamily(
            "keepstate_http_request_seconds", "HTTP request latency by route template", labels=["route", "method"]
        )
        merged: dict[tuple[str, str], _Series] = {}  # the latency histogram has no status label
        for (route, method, status), series in list(self.series.items()):
            requests.add_metric([route, method, str(status)], series.count)
            into = merged.setdefault((route, method), _Series())
            into.total += series.total
            into.buckets = [a + b for a, b in zip(into.buckets, series.buckets, strict=True)]
        for (route, method), series in merged.items():
            latency.add_metric([route, method], series.cumulative(BUCKETS), series.total)
        yield requests
        yield latency


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class StoreCollector:
    """Store calls by operation (``platform.claim``, ``state.get``, ...): ``keepstate_store_seconds``."""

    def __init__(self) -> None:
        self.series: dict[str, _Series] = {}

    def observe(self, operation: str, seconds: float) -> None:
        found = self.series.get(operation)
        if found is None:
            found = self.series[operation] = _Series(len(STORE_BUCKETS))
        found.count += 1
        found.total += seconds
        found.buckets[bisect.bisect_left(STORE_BUCKETS, seconds)] += 1

    def collect(self) -> Iterator[Metric]:
        latency = HistogramMetricFamily(
            "keepstate_store_seconds", "Store call latency by operation (this server)", labels=["operation"]
        )
        for operation, series in list(self.series.items()):
            latency.add_metric([operation], series.cumulative(STORE_BUCKETS), series.total)
        yield latency


class Timed:
    """A facet (or Database) whose coroutine methods are timed into a ``StoreCollector`` as ``{prefix}.{name}``.

    Everything else (plain attributes, async generators such as an export's ``records``) passes through.
    A method is wrapped on first use and kept on the proxy, so later calls cost one coroutine frame and
    two clock reads more than the facet's own."""

    def __init__(self, target: object, store: StoreCollector, prefix: str) -> None:
        self._target = target
        self._store = store
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._target, name)
        if not inspect.iscoroutinefunction(found):
            return found
        timed = _timed(found, self._store.observe, f"{self._prefix}.{name}")
        setattr(self, name, timed)
        return timed


def _timed(
    fn: Callable[..., Awaitable[Any]], observe: Callable[[str, float], None], operation: str
) -> Callable[..., Awaitable[Any]]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            observe(operation, time.perf_counter() - started)

    return call


def instrument(platform: Platform, store: StoreCollector) -> None:
    """Time every store call ``platform`` makes: its platform and state facets and its Database. Call it
    before anything takes ``platform.repo`` or ``platform.state`` (``Invocations``, ``StateApi``)."""
    platform.repo = cast(PlatformFacet, Timed(platform.repo, store, "platform"))
    platform.state = cast(StateFacet, Timed(platform.state, store, "state"))
    platform.database = cast(Database, Timed(platform.database, store, "database"))


class RunsCollector:
    """The store's runs by environment, agent and status, and each agent's queue age and last claim,
    from the last ``refresh``; and the runs this process's sweeps expired, interrupted and purged."""

    def __init__(self) -> None:
        self.stats: list[AgentStats] = []
        self.read_at = -RUNS_CACHE_S
        self.upkeep: Upkeep | None = None

    async def refresh(self, repo: PlatformFacet) -> None:
        """Read the store unless the last read is younger than ``RUNS_CACHE_S``; a failed read shows nothing."""
        if time.monotonic() - self.read_at < RUNS_CACHE_S:
            return
        try:
            self.stats = await repo.agent_stats(None)
        except KeepstateError:
            self.stats = []
            raise
        finally:
            self.read_at = time.monotonic()

    def collect(self) -> Iterator[Metric]:
        now = now_ms()
        runs = GaugeMetricFamily(
            "keepstate_runs", "Runs in the store by environment, agent and status", labels=["env", "agent", "status"]
        )
        oldest = GaugeMetricFamily(
            "keepstate_queue_oldest_seconds",
            "Age of the agent's oldest queued run (or resume)",
            labels=["env", "agent"],
        )
        claimed = GaugeMetricFamily(
            "keepstate_agent_last_claim_timestamp_seconds",
            "When a worker last claimed for the agent (any server)",
            labels=["env", "agent"],
        )
        for agent in self.stats:
            for status, count in sorted(agent.runs.items()):
                runs.add_metric([agent.env, agent.agent, status], count)
            if agent.oldest_queued_at is not None:
                oldest.add_metric([agent.env, agent.agent], max(0, now - agent.oldest_queued_at) / 1000)
            if agent.last_claim_at is not None:
                claimed.add_metric([agent.env, agent.agent], agent.last_claim_at / 1000)
        yield from (runs, oldest, claimed)
        if self.upkeep is not None:
            yield from self._sweeps(self.upkeep)

    def _sweeps(self, upkeep: Upkeep) -> Iterator[Metric]:
        for name, text in SWEPT.items():
            family = CounterMetricFamily(f"keepstate_sweep_{name}", text)
            family.add_metric([], upkeep.counts[name])
            yield family


class StreamsCollector:
    """The run event streams open on this process (``keepstate_event_streams``): each holds a connection."""

    def __init__(self) -> None:
        self.waiters: Waiters | None = None

    def collect(self) -> Iterator[Metric]:
        streams = GaugeMetricFamily("keepstate_event_streams", "Run event streams open on this server")
        streams.add_metric([], 0 if self.waiters is None else self.waiters.open)
        yield streams


SWEPT = {
    "expired": "Queued runs this process's sweeps expired (past their queue_timeout)",
    "interrupted": "Runs this process's lease sweeps interrupted (their invocation's lease ran out)",
    "purged": "Finished runs this process purged (--retention-days)",
    "keys_expired": "Expired state keys this process's sweeps freed (their values and list items)",
    "sessions_purged": "Session-store records this process purged (a day after they expired)",
    "answers_forgotten": "Answers of idempotent writes this process forgot (a day after they were kept)",
}


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = RequestCollector()
        self.store = StoreCollector()
        self.runs = RunsCollector()
        self.streams = StreamsCollector()
        for collector in (self.requests, self.store, self.runs, self.streams):
            self.registry.register(collector)
        self.store_errors = Counter(
            "keepstate_store_errors", "Store errors (unavailable) seen by requests", registry=self.registry
        )
        self.observe = self.requests.observe
        """``observe(route, method, status, seconds)``: one request, counted."""

    async def render(self, platform: Platform) -> Response:
        """The text format; the store's run counts are refreshed first (a store that does not answer
        leaves them out and counts a store error: the scrape itself still answers)."""
        try:
            await self.runs.refresh(platform.repo)
        except KeepstateError:
            self.store_errors.inc()
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(template, scope["method"], status, time.perf_counter() - started)
