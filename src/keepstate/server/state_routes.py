"""The State API's routes, as raw ASGI endpoints: the hot path of the server.

Starlette treats a ``Route`` endpoint that is not a function as an ASGI app, so these skip the
``Request`` and ``Response`` objects and the per-route exception wrapper of function endpoints
(measured: about a fifth of a state GET's time in the app). Nothing else changes: a handler
raises ``KeepstateError`` and the app-wide ``ExceptionMiddleware`` writes it through the one
handler in ``app.py``; the router still puts the route in the scope for the metrics middleware.
Rules stay in ``StateApi``; here is only parsing and serialising, as in ``routes.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.datastructures import QueryParams
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..errors import InvalidRequest
from ..platform.models import RunContext
from ..platform.service import DEFAULT_LIMIT, MAX_LIMIT, Platform
from ..platform.state import StateApi
from ..scope import check_if_version
from .http import parse_object, query_int, receive_body

TOKEN_HEADER = "x-agentos-run-token"
_TOKEN = TOKEN_HEADER.encode()
_CONTENT_LENGTH = b"content-length"
_JSON = (b"content-type", b"application/json")


class StateCall:
    """One state request as a handler sees it: the path, the query, the body, and the run token,
    which each handler checks first (``authenticate``; GET checks it with its read)."""

    __slots__ = ("api", "kind", "platform", "receive", "scope")

    def __init__(self, scope: Scope, receive: Receive, platform: Platform, api: StateApi) -> None:
        self.scope = scope
        self.receive = receive
        self.platform = platform
        self.api = api
        self.kind: str = scope["path_params"]["scope"]

    @property
    def token(self) -> str | None:
        return header(self.scope, _TOKEN)

    async def authenticate(self) -> RunContext:
        caller = await self.platform.authenticate_run(self.token)
        assert caller.run is not None
        return caller.run

    @property
    def key(self) -> str:
        key: str = self.scope["path_params"]["key"]
        return key

    @property
    def query_params(self) -> QueryParams:
        return QueryParams(self.scope["query_string"])

    async def json_object(self) -> dict[str, Any]:
        return parse_object(await receive_body(self.receive, header(self.scope, _CONTENT_LENGTH)))


Handler = Callable[[StateCall], Awaitable[bytes | None]]
"""A state route's work: the JSON body of its 200 answer, or None for 204 No Content."""


def header(scope: Scope, name: bytes) -> str | None:
    """The first header called ``name`` (lower case, as ASGI servers pass them), like ``Headers.get``."""
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


class StateRoute:
    """A raw ASGI endpoint: run the handler, send its JSON (or 204)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.respond(scope, receive, send)

    async def respond(self, scope: Scope, receive: Receive, send: Send) -> int:
        """Answer the request; the status sent (errors are raised, not sent)."""
        state = scope["app"].state
        body = await self.handler(StateCall(scope, receive, state.platform, state.state_api))
        if body is None:
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return 204
        headers = [(_CONTENT_LENGTH, str(len(body)).encode()), _JSON]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return 200


async def state_get(call: StateCall) -> bytes:
    entry = await call.api.get_as(call.platform, call.token, call.kind, call.key)
    return b'{"value":' + entry.data + b',"version":' + str(entry.version).encode() + b"}"


async def state_put(call: StateCall) -> bytes:
    version = await call.api.put(await call.authenticate(), call.kind, call.key, await call.json_object())
    return b'{"version":' + str(version).encode() + b"}"


async def state_delete(call: StateCall) -> None:
    run = await call.authenticate()
    if_version = call.query_params.get("if_version")
    version = None if if_version in (None, "") else check_if_version(_int_or_none(if_version))
    await call.api.delete(run, call.kind, call.key, version)


def _int_or_none(text: str | None) -> int:
    if text is None or not text.isdigit() or len(text) > 18:
        raise InvalidRequest("if_version must be a non-negative integer")
    return int(text)


async def state_append(call: StateCall) -> bytes:
    version, length = await call.api.append(await call.authenticate(), call.kind, call.key, await call.json_object())
    return orjson.dumps({"version": version, "length": length})


async def state_keys(call: StateCall) -> bytes:
    run = await call.authenticate()
    params = call.query_params
    limit = query_int(call, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    found, next_key = await call.api.keys(run, call.kind, params.get("prefix", ""), params.get("after", ""), limit)
    return orjson.dumps({"keys": [{"key": k, "version": v} for k, v in found], "next": next_key})


def _route(path: str, handler: Handler, method: str) -> Route:
    return Route(path, StateRoute(handler), methods=[method], name=handler.__name__)


STATE_ROUTES = [
    _route("/v0/state/{scope}/{key}", state_get, "GET"),
    _route("/v0/state/{scope}/{key}", state_put, "PUT"),
    _route("/v0/state/{scope}/{key}", state_delete, "DELETE"),
    _route("/v0/state/{scope}/{key}/append", state_append, "POST"),
    _route("/v0/state/{scope}", state_keys, "GET"),
]


_PREFIX = "/v0/state/"
_TEMPLATES = {1: "/v0/state/{scope}", 2: "/v0/state/{scope}/{key}", 3: "/v0/state/{scope}/{key}/append"}
_BY_METHOD_AND_TEMPLATE = {(method, route.path): route for route in STATE_ROUTES for method in route.methods or ()}


def match_state_route(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The state route that Starlette's router would pick for this method and path, and its path
    parameters; None for anything else (so the router answers it: 404, 405, HEAD, odd paths).

    Every segment must be non-empty and have no ``/``, as Starlette's default ``{param}`` matches."""
    if not path.startswith(_PREFIX) or method == "HEAD":
        return None
    parts = path[len(_PREFIX):].split("/")
    template = _TEMPLATES.get(len(parts))
    if template is None or not all(parts) or (len(parts) == 3 and parts[2] != "append"):
        return None
    route = _BY_METHOD_AND_TEMPLATE.get((method, template))
    if route is None:
        return None
    return route, ({"scope": parts[0]} if len(parts) == 1 else {"scope": parts[0], "key": parts[1]})
