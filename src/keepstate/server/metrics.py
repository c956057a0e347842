"""Prometheus metrics: requests by route template and status, latency histograms, store errors.

Counting is plain Python on the event loop's thread (a dict look-up, a bisect, three additions):
prometheus_client's own ``Counter``/``Histogram`` take a lock per increment and scan the buckets,
which was a measurable share of a state GET. A custom collector turns the counts into the same
metric families at scrape time, in prometheus_client's text format. Each server process has its
own; with ``--workers N`` scrape each or aggregate by instance.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _Series:
    """One (route, method, status): a request count, a latency sum and per-bucket counts."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.buckets = [0] * (len(BUCKETS) + 1)  # the last one is +Inf


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
        requests = CounterMetricFamily("keepstate_http_requests", "HTTP requests by route template, method and status",
                                       labels=["route", "method", "status"])
        latency = HistogramMetricFamily("keepstate_http_request_seconds", "HTTP request latency by route template",
                                        labels=["route", "method"])
        merged: dict[tuple[str, str], _Series] = {}  # the latency histogram has no status label
        for (route, method, status), series in list(self.series.items()):
            requests.add_metric([route, method, str(status)], series.count)
            into = merged.setdefault((route, method), _Series())
            into.total += series.total
            into.buckets = [a + b for a, b in zip(into.buckets, series.buckets, strict=True)]
        for (route, method), series in merged.items():
            cumulative, running = [], 0
            for bound, count in zip((*BUCKETS, float("inf")), series.buckets, strict=True):
                running += count
                cumulative.append((_bound(bound), running))
            latency.add_metric([route, method], cumulative, series.total)
        yield requests
        yield latency


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = RequestCollector()
        self.registry.register(self.requests)
        self.store_errors = Counter("keepstate_store_errors", "Store errors (unavailable) seen by requests",
                                    registry=self.registry)
        self.observe = self.requests.observe
        """``observe(route, method, status, seconds)``: one request, counted."""

    def render(self, request: Request) -> Response:
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
