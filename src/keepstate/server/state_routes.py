"""The State API's routes: one dispatch on the raw path, the hot path of the server.

State requests are most of a server's traffic, so they skip Starlette's router, ``Request`` and
``Response`` objects and its middleware: ``KeepstateApp`` hands every ``/v0/state/...`` request to
``match_state`` and then to one of the raw ASGI handlers below. The path is matched on the **raw**
path, split at ``/`` and percent-decoded segment by segment, so ``a%2Fappend`` is the one key
``a/append`` (refused as ``invalid_key``), never an append to ``a``. A path of no state shape is 404,
a method the path does not have is 405 with an ``Allow`` of every method it has.
Rules stay in ``StateApi``; here is only parsing and serialising, as in ``routes.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from starlette.datastructures import QueryParams
from starlette.types import Receive, Scope, Send

from ..errors import InvalidRequest
from ..platform.service import Platform
from ..platform.state import StateApi
from ..protocol import DEFAULT_PAGE, MAX_PAGE, RUN_TOKEN_HEADER
from ..scope import check_if_version
from ..stores.records import RunContext
from .http import parse_object, query_int, receive_body

_TOKEN = RUN_TOKEN_HEADER.encode()
_CONTENT_LENGTH = b"content-length"
_JSON = (b"content-type", b"application/json")
PREFIX = "/v0/state/"
_RAW_PREFIX = PREFIX.encode()


class StateCall:
    """One state request as a handler sees it: the path, the query, the body, and the run token,
    which each handler checks first (``authenticate``; GET checks it with its read)."""

    __slots__ = ("api", "key", "kind", "platform", "receive", "scope")

    def __init__(self, scope: Scope, receive: Receive, platform: Platform, api: StateApi,
                 params: dict[str, str]) -> None:
        self.scope = scope
        self.receive = receive
        self.platform = platform
        self.api = api
        self.kind = params["scope"]
        self.key = params.get("key", "")

    @property
    def token(self) -> str | None:
        return header(self.scope, _TOKEN)

    async def authenticate(self) -> RunContext:
        caller = await self.platform.authenticate_run(self.token)
        assert caller.run is not None
        return caller.run

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


async def respond(handler: Handler, scope: Scope, receive: Receive, send: Send, params: dict[str, str]) -> int:
    """Run ``handler`` and send its JSON (or 204); the status sent (errors are raised, not sent)."""
    state = scope["app"].state
    body = await handler(StateCall(scope, receive, state.platform, state.state_api, params))
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
    limit = query_int(call, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
    found, next_key = await call.api.keys(run, call.kind, params.get("prefix", ""), params.get("after", ""), limit)
    return orjson.dumps({"keys": [{"key": k, "version": v} for k, v in found], "next": next_key})


@dataclass(frozen=True, slots=True)
class Shape:
    """One path shape of the State API: its template (for metrics and docs) and its handlers by method."""

    template: str
    handlers: dict[str, Handler] = field(default_factory=dict)

    @property
    def allow(self) -> str:
        methods = list(self.handlers)
        if "GET" in methods:
            methods.insert(methods.index("GET") + 1, "HEAD")
        return ", ".join(methods)

    def handler(self, method: str) -> Handler | None:
        return self.handlers.get("GET" if method == "HEAD" else method)


LIST = Shape("/v0/state/{scope}", {"GET": state_keys})
KEY = Shape("/v0/state/{scope}/{key}", {"GET": state_get, "PUT": state_put, "DELETE": state_delete})
ACTIONS = {"append": Shape("/v0/state/{scope}/{key}/append", {"POST": state_append})}
SHAPES = (LIST, KEY, *ACTIONS.values())


@dataclass(frozen=True, slots=True)
class Match:
    """What a state path names: its shape, its path parameters, and its handler (None: 405)."""

    shape: Shape
    params: dict[str, str]
    handler: Handler | None


def segments(raw_path: bytes) -> list[str]:
    """The raw path's segments after the prefix, each percent-decoded on its own (a ``%2F`` stays inside
    its segment). Bytes that are not UTF-8 become U+FFFD: no key or scope holds them, so they are refused."""
    rest = raw_path.split(b"?", 1)[0][len(_RAW_PREFIX):]
    return [unquote_to_bytes(part).decode("utf-8", "replace") for part in rest.split(b"/")]


def is_state_path(raw_path: bytes) -> bool:
    return raw_path.startswith(_RAW_PREFIX)


def match_state(method: str, raw_path: bytes) -> Match | None:
    """The shape and handler of a ``/v0/state/...`` request; None when the path has no state shape (404).

    ``{scope}`` and ``{scope}/`` list keys; ``{scope}/{key}`` is a key; ``{scope}/{key}/ACTION`` an action."""
    parts = segments(raw_path)
    if len(parts) == 2 and parts[1] == "":
        parts = parts[:1]
    if not parts[0]:
        return None
    if len(parts) == 1:
        shape, params = LIST, {"scope": parts[0]}
    elif len(parts) == 2:
        shape, params = KEY, {"scope": parts[0], "key": parts[1]}
    elif len(parts) == 3 and parts[2] in ACTIONS:
        shape, params = ACTIONS[parts[2]], {"scope": parts[0], "key": parts[1]}
    else:
        return None
    return Match(shape, params, shape.handler(method))
