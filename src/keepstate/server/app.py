"""The ASGI application: routes, the one error writer (``errors.py``), metrics, health, the store's life.

Starlette, not FastAPI: on this machine FastAPI served the same small GET ~2.6x slower (see
``bench/bench_http.py`` and docs/http-api.md), and request validation here is
``keepstate.values`` either way. Every ``KeepstateError`` becomes its JSON body and status (503
also gets ``Retry-After``); anything else is a logged 500 ``internal``, which is a bug.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..embedders import load_embedder
from ..errors import KeepstateError, NotFound
from ..platform import Invocations, Platform, StateApi, open_platform
from ..platform.embedding import RETRY_S, EmbeddingRetry
from ..platform.memory import MemoryApi
from ..platform.run_events import RunEvents, keepalive_from_env
from ..platform.service import DEFAULT_QUEUE_TIMEOUT_S
from ..platform.session_stores import open_session_stores
from ..platform.upkeep import Upkeep, lease_spaces
from .bootstrap import bootstrap
from .console import console_routes
from .errors import MethodNotAllowed, error_response
from .event_routes import EVENT_ROUTES
from .http import json_response
from .memory_routes import MEMORY_ROUTES, open_memory_api
from .metrics import Metrics, MetricsMiddleware, instrument
from .openapi import DOCUMENT
from .routes import ROUTES
from .session_routes import SESSION_STORE_ROUTES
from .signals import on_exit_signals
from .state_routes import is_state_path, match_state, respond

log = logging.getLogger("keepstate.server")


async def on_error(request: Request, error: Exception) -> Response:
    """Starlette's exception handler for everything: the one error writer."""
    return error_response(error, request.method, request.url.path, request.app.state.metrics)


class KeepstateApp(Starlette):
    """Starlette, with the State API's requests sent straight to their handlers.

    State calls are most of a server's traffic, and for them Starlette's app-wide layers (error
    middleware, the metrics wrapper, exception middleware, the router's scan) are pure cost. Every
    ``/v0/state/...`` request is matched here on its raw path (``state_routes.match_state``) and
    answered with the same error writers and metrics; anything else goes through Starlette. Outside
    the State API no path segment may hold an encoded ``/``: every id is in the key charset, so such a
    path names nothing (404) — and is never read as a different route after decoding.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path"):
            await super().__call__(scope, receive, send)
            return
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        if is_state_path(raw_path):
            await self._state(scope, receive, send, raw_path)
        elif b"%2f" in raw_path.lower():
            response = error_response(NotFound("no such route"), scope["method"], scope["path"], self.state.metrics)
            await response(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    async def _state(self, scope: Scope, receive: Receive, send: Send, raw_path: bytes) -> None:
        started = time.perf_counter()
        method = scope["method"]
        found = match_state(method, raw_path)
        template = "unmatched" if found is None else found.template
        scope["app"] = self
        try:
            if found is None:
                raise NotFound("no such route")
            if found.handler is None:
                raise MethodNotAllowed(found.shape.allow)
            status = await respond(found, scope, receive, send)
        except ClientDisconnect:
            status = 499  # nobody to answer; counted under nginx's code for it
        except Exception as error:
            response = error_response(error, method, scope["path"], self.state.metrics)
            await response(scope, receive, send)
            status = response.status_code
        self.state.metrics.observe(template, method, status, time.perf_counter() - started)


async def healthz(request: Request) -> Response:
    return json_response({"ok": True})


async def readyz(request: Request) -> Response:
    platform: Platform = request.app.state.platform
    try:
        await platform.ping()
    except KeepstateError as error:
        return json_response({"ok": False, "error": error.code, "message": error.message}, 503, {"Retry-After": "1"})
    return json_response({"ok": True})


async def metrics(request: Request) -> Response:
    found: Metrics = request.app.state.metrics
    return await found.render(request.app.state.platform)


async def openapi(request: Request) -> Response:
    return json_response(DOCUMENT)


def create_app(
    store_url: str,
    lease_seconds: float = 30.0,
    bootstrap_admin: bool = False,
    admin_key: str | None = None,
    queue_timeout: float = DEFAULT_QUEUE_TIMEOUT_S,
    retention_days: float | None = None,
    console: bool = True,
    embedder: str | None = None,
) -> KeepstateApp:
    """The app over the store at ``store_url``, opened at startup and closed at shutdown.

    With ``bootstrap_admin`` the startup also makes sure of the bootstrap admin key (see ``bootstrap``).
    ``queue_timeout``: seconds a run may stay queued unless it says otherwise; ``retention_days``: finished
    runs older than that are purged in the background (None: kept); with ``console`` it serves the web
    console at ``/console/`` (``server/console``). ``embedder`` (a spec: ``local``, ``module:callable``)
    makes memory searchable by meaning; documents it failed to embed are retried every
    ``KEEPSTATE_EMBED_RETRY`` seconds (30).
    """
    app_metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        platform = await open_platform(store_url, lease_seconds, queue_timeout)
        instrument(platform, app_metrics.store)
        app.state.platform = platform
        app.state.invocations = Invocations(platform)
        app.state.run_events = run_events = RunEvents(platform, keepalive_from_env())
        app_metrics.streams.waiters = run_events.waiters
        app.state.state_api = StateApi(platform.state)
        app.state.memory_api = await open_memory_api(platform.database, load_embedder(embedder))
        app.state.session_stores = await open_session_stores(platform.database)
        if bootstrap_admin:
            await bootstrap(platform, admin_key)
        leases = await lease_spaces(platform.database)
        upkeep = app_metrics.runs.upkeep = Upkeep(app.state.invocations, retention_days, leases)
        upkeep.start()
        retry = embedding_retry(app.state.memory_api)
        try:
            with on_exit_signals(run_events.waiters.end_streams):
                yield
        finally:
            if retry is not None:
                await retry.stop()
                retry.embedder.close()
            await run_events.aclose()
            await upkeep.stop()
            await platform.aclose()
            print("keepstate: stopped, store closed", file=sys.stderr, flush=True)

    routes = [
        *ROUTES,
        *EVENT_ROUTES,
        *MEMORY_ROUTES,
        *SESSION_STORE_ROUTES,
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *(console_routes() if console else []),
    ]
    app = KeepstateApp(
        routes=routes,
        middleware=[Middleware(MetricsMiddleware, metrics=app_metrics)],
        exception_handlers={KeepstateError: on_error, HTTPException: on_error, Exception: on_error},
        lifespan=lifespan,
    )
    app.state.metrics = app_metrics
    return app


def embedding_retry(api: MemoryApi | None) -> EmbeddingRetry | None:
    """The background retry of the documents a write could not embed, started, when memory has an embedder."""
    if api is None or api.embedder is None:
        return None
    retry = EmbeddingRetry(api.facet, api.embedder, float(os.environ.get("KEEPSTATE_EMBED_RETRY", RETRY_S)))
    retry.start()
    return retry


def app_from_env() -> KeepstateApp:
    """Factory for ``--workers N``: each worker process builds its app from the environment."""
    retention = os.environ.get("KEEPSTATE_RETENTION_DAYS")
    return create_app(
        os.environ["KEEPSTATE_STORE"],
        float(os.environ.get("KEEPSTATE_INVOCATION_LEASE", "30")),
        queue_timeout=float(os.environ.get("KEEPSTATE_QUEUE_TIMEOUT", str(DEFAULT_QUEUE_TIMEOUT_S))),
        retention_days=float(retention) if retention else None,
        console=os.environ.get("KEEPSTATE_CONSOLE", "1") != "0",
        embedder=os.environ.get("KEEPSTATE_EMBEDDER") or None,
    )
