"""Prometheus metrics: requests by route template and status, latency histograms, store errors.

A pure ASGI middleware (no per-request task or body buffering), with the labelled children
cached so a request costs two dictionary looks-ups and an observe. Each server process has its
own registry; with ``--workers N`` scrape each or aggregate by instance.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("keepstate_http_requests", "HTTP requests by route template, method and status",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("keepstate_http_request_seconds", "HTTP request latency by route template",
                                 ["route", "method"], buckets=BUCKETS, registry=self.registry)
        self.store_errors = Counter("keepstate_store_errors", "Store errors (unavailable) seen by requests",
                                    registry=self.registry)
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:
            children = (self.requests.labels(route, method, str(status)), self.latency.labels(route, method))
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

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
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(template, scope["method"], status, time.perf_counter() - started)
