"""The State API's routes: one dispatch on the raw path, the hot path of the server.

State requests are most of a server's traffic, so they skip Starlette's router, ``Request`` and
``Response`` objects and its middleware: ``KeepstateApp`` hands every state request to ``match_state``
and then to one of the raw ASGI handlers below. Two families of paths reach the same handlers:

- ``/v0/state/{scope}/…`` with a run token (the seed's API) and ``POST /v0/state/batch``;
- the callers' prefixes ``/v0/sessions/{id}/state/{agent}/``, ``/v0/runs/{id}/state/``,
  ``/v0/agents/{agent}/state/`` and ``/v0/users/{user}/state/{agent}/`` with a key.

After the prefix: nothing (or ``/``) lists keys; ``{key}`` is a key (GET, PUT, PATCH, DELETE);
``{key}/append|trim|pop|incr`` an action (POST). The path is matched on the **raw** path, split at
``/`` and percent-decoded segment by segment, so ``a%2Fappend`` is the one key ``a/append`` (refused
as ``invalid_key``), never an append to ``a``. A path of no state shape is 404, a method the path does
not have is 405 with an ``Allow`` of every method it has. Each handler authenticates before it reads
a body. Rules stay in ``StateApi``; here is only parsing and serialising, as in ``routes.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

import orjson
from starlette.datastructures import QueryParams
from starlette.types import Receive, Scope, Send

from ..errors import InvalidRequest
from ..platform.models import Caller
from ..platform.service import Platform
from ..platform.state import Address, StateApi
from ..protocol import DEFAULT_PAGE, MAX_PAGE, RUN_TOKEN_HEADER
from ..scope import check_if_version
from ..stores.records import RunContext
from ..stores.remembered import Answer
from . import idempotent
from .http import parse_body, query_int, receive_body

T = TypeVar("T")

_TOKEN = RUN_TOKEN_HEADER.encode()
_AUTHORIZATION = b"authorization"
_CONTENT_LENGTH = b"content-length"
_IDEMPOTENCY_KEY = idempotent.HEADER.encode()
_JSON = (b"content-type", b"application/json")


class StateCall:
    """One state request as a handler sees it: its address, key, query and body, and the credential,
    which each handler checks first (``namespace``; a run token's GET checks it with its read)."""

    __slots__ = ("address", "api", "body", "caller", "key", "platform", "receive", "scope")

    def __init__(
        self, scope: Scope, receive: Receive, platform: Platform, api: StateApi, address: Address, key: str
    ) -> None:
        self.scope = scope
        self.receive = receive
        self.platform = platform
        self.api = api
        self.address = address
        self.key = key
        self.body: bytes | None = None
        self.caller: Caller | None = None
        """Who ``namespace`` found the request's credential to be (a key's caller scopes its idempotency keys)."""

    @property
    def token(self) -> str | None:
        return header(self.scope, _TOKEN)

    async def run(self) -> RunContext:
        caller = self.caller = await self.platform.authenticate_run(self.token)
        assert caller.run is not None
        return caller.run

    async def namespace(self, writes: bool = False) -> str:
        """Authenticate (run token or key, as the address needs) and resolve the namespace (``writes``:
        for a write that may create state, ``StateApi.namespace``)."""
        if self.address.kind == "token":
            caller = await self.platform.authenticate_run(self.token)
        else:
            caller = await self.platform.authenticate(header(self.scope, _AUTHORIZATION))
        self.caller = caller
        return await self.api.namespace(self.platform, caller, self.address, writes)

    @property
    def query_params(self) -> QueryParams:
        return QueryParams(self.scope["query_string"])

    async def json_object(self, optional: bool = False) -> dict[str, Any]:
        self.body = await receive_body(self.receive, header(self.scope, _CONTENT_LENGTH))
        return await parse_body(self.body, optional)

    async def write(
        self, work: Callable[[], Awaitable[T]], render: Callable[[T], bytes], status: int = 200, one_write: bool = True
    ) -> bytes:
        """The write's answer body; with an ``Idempotency-Key``, run once and remembered (``idempotent.py``),
        a repeat raising ``Replayed``. ``render`` gets what the store's write returned (None: nothing).
        ``one_write``: ``work`` is one state facet write, not a patch (``Memo.one_write``)."""
        key = idempotent.idempotency_key(header(self.scope, _IDEMPOTENCY_KEY))
        if key is None:
            return render(await work())
        assert self.caller is not None, "a write authenticates (namespace) before it writes"
        if self.address.kind == "token":
            caller = idempotent.token_caller(self.token)
            assert caller is not None
        else:
            caller = idempotent.key_caller(self.caller)
        print_ = idempotent.fingerprint(self.scope, self.body or b"")

        def answer(result: Any) -> Answer | None:
            return None if result is None and status == 200 else Answer(status, render(result))

        answered = await idempotent.answer_once(self.platform.repo, caller, key, print_, work, answer, one_write)
        return answered.body


Handler = Callable[[StateCall], Awaitable[bytes | None]]
"""A state route's work: the JSON body of its 200 answer, or None for 204 No Content."""


def header(scope: Scope, name: bytes) -> str | None:
    """The first header called ``name`` (lower case, as ASGI servers pass them), like ``Headers.get``."""
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


async def respond(found: Match, scope: Scope, receive: Receive, send: Send) -> int:
    """Run the match's handler and send its JSON (or 204); the status sent (errors are raised, not sent)."""
    assert found.handler is not None
    state = scope["app"].state
    try:
        body = await found.handler(StateCall(scope, receive, state.platform, state.state_api, found.address, found.key))
    except idempotent.Replayed as replayed:
        return await send_replayed(replayed.answer, send)
    if body is None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return 204
    headers = [(_CONTENT_LENGTH, str(len(body)).encode()), _JSON]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
    return 200


async def send_replayed(answer: Answer, send: Send) -> int:
    """A remembered answer sent again, marked as such."""
    headers = [_JSON, (b"idempotent-replayed", b"true")]
    if answer.body:
        headers.insert(0, (_CONTENT_LENGTH, str(len(answer.body)).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})
    return answer.status


def _int_query(call: StateCall, name: str) -> int | None:
    text = call.query_params.get(name)
    if text is None or text == "":
        return None
    if not text.lstrip("-").isdigit() or len(text) > 19:
        raise InvalidRequest(f"{name} must be an integer")
    return int(text)


def _page(page: Any) -> bytes:
    return b'{"items":[' + b",".join(page.items) + b'],"version":%d,"length":%d}' % (page.version, page.length)


async def state_get(call: StateCall) -> bytes:
    params = call.query_params
    if "tail" in params or "start" in params or "limit" in params:
        ns = await call.namespace()
        page = await call.api.read_list(
            ns, call.key, _int_query(call, "tail"), _int_query(call, "start"), _int_query(call, "limit")
        )
        return _page(page)
    if call.address.kind == "token":
        entry = await call.api.get_as(call.platform, call.token, call.address.scope, call.key)
    else:
        entry = await call.api.get(await call.namespace(), call.key)
    tail = b"}" if entry.expires_at is None else b',"expires_at":%d}' % entry.expires_at
    return b'{"value":' + entry.data + b',"version":' + str(entry.version).encode() + tail


async def state_put(call: StateCall) -> bytes:
    ns = await call.namespace(writes=True)
    body = await call.json_object()
    return await call.write(lambda: call.api.write(ns, "put", call.key, body), _versioned)


def _versioned(version: int) -> bytes:
    return b'{"version":%d}' % version


async def state_patch(call: StateCall) -> bytes:
    ns = await call.namespace(writes=True)
    body = await call.json_object()
    return await call.write(lambda: call.api.write(ns, "patch", call.key, body), _patched, one_write=False)


def _patched(answer: tuple[bytes, int]) -> bytes:
    return b'{"value":' + answer[0] + b',"version":%d}' % answer[1]


async def state_delete(call: StateCall) -> None:
    ns = await call.namespace()
    if_version = call.query_params.get("if_version")
    version = None if if_version in (None, "") else check_if_version(_if_version(if_version))
    await call.write(lambda: call.api.write(ns, "delete", call.key, {"if_version": version}), lambda _: b"", 204)


def _if_version(text: str | None) -> int:
    if text is None or not text.isdigit() or len(text) > 18:
        raise InvalidRequest("if_version must be a non-negative integer")
    return int(text)


async def state_append(call: StateCall) -> bytes:
    ns = await call.namespace(writes=True)
    body = await call.json_object()
    return await call.write(lambda: call.api.write(ns, "append", call.key, body), _sized)


def _sized(answer: tuple[int, int]) -> bytes:
    return b'{"version":%d,"length":%d}' % tuple(answer)


async def state_trim(call: StateCall) -> bytes:
    ns = await call.namespace(writes=True)
    body = await call.json_object()
    return await call.write(lambda: call.api.write(ns, "trim", call.key, body), _sized)


async def state_pop(call: StateCall) -> bytes:
    ns = await call.namespace(writes=True)
    body = await call.json_object(optional=True)
    return await call.write(lambda: call.api.write(ns, "pop", call.key, body), _popped)


def _popped(answer: tuple[bytes, int, int]) -> bytes:
    item, version, length = answer
    return b'{"item":' + item + b',"version":%d,"length":%d}' % (version, length)


async def state_incr(call: StateCall) -> bytes:
    ns = await call.namespace(writes=True)
    body = await call.json_object(optional=True)
    return await call.write(lambda: call.api.write(ns, "incr", call.key, body), _counted)


def _counted(answer: tuple[int, int]) -> bytes:
    return b'{"value":%d,"version":%d}' % tuple(answer)


async def state_keys(call: StateCall) -> bytes:
    ns = await call.namespace()
    params = call.query_params
    limit = query_int(call, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
    found, next_key = await call.api.keys(ns, params.get("prefix", ""), params.get("after", ""), limit)
    return orjson.dumps({"keys": [{"key": k, "version": v} for k, v in found], "next": next_key})


async def state_batch(call: StateCall) -> bytes:
    run = await call.run()
    planned = call.api.plan_batch(run, await call.json_object())

    def results(answers: list[Any]) -> bytes:
        parts = (_batch_answer(op.op, answer) for op, answer in zip(planned, answers, strict=True))
        return b'{"results":[' + b",".join(parts) + b"]}"

    return await call.write(lambda: call.api.batch(planned), results, one_write=False)


def _batch_answer(op: str, answer: Any) -> bytes:
    """One op's answer in a batch: what that call alone answers (``{}`` for a delete)."""
    if op in ("append", "trim"):
        return b'{"version":%d,"length":%d}' % (int(answer[0]), int(answer[1]))
    if op == "incr":
        return b'{"value":%d,"version":%d}' % (int(answer[0]), int(answer[1]))
    if op == "patch":
        return b'{"value":' + bytes(answer[0]) + b',"version":%d}' % int(answer[1])
    if op == "delete":
        return b"{}"
    return b'{"version":%d}' % int(answer)


@dataclass(frozen=True, slots=True)
class Shape:
    """One path shape of the State API: its template's tail (for metrics) and its handlers by method."""

    tail: str
    handlers: dict[str, Handler] = field(default_factory=dict)

    @property
    def allow(self) -> str:
        methods = list(self.handlers)
        if "GET" in methods:
            methods.insert(methods.index("GET") + 1, "HEAD")
        return ", ".join(methods)

    def handler(self, method: str) -> Handler | None:
        return self.handlers.get("GET" if method == "HEAD" else method)


LIST = Shape("", {"GET": state_keys})
KEY = Shape("/{key}", {"GET": state_get, "PUT": state_put, "PATCH": state_patch, "DELETE": state_delete})
ACTIONS = {
    name: Shape(f"/{{key}}/{name}", {"POST": handler})
    for name, handler in (("append", state_append), ("trim", state_trim), ("pop", state_pop), ("incr", state_incr))
}
BATCH = Shape("/batch", {"POST": state_batch})
PREFIXES = {
    # first segment after /v0/ -> (address kind, segments of the prefix, template of the prefix)
    "state": ("token", 2, "/v0/state/{scope}"),
    "sessions": ("session", 4, "/v0/sessions/{id}/state/{agent}"),
    "runs": ("run", 3, "/v0/runs/{id}/state"),
    "agents": ("agent", 3, "/v0/agents/{agent}/state"),
    "users": ("user", 4, "/v0/users/{user}/state/{agent}"),
}


@dataclass(frozen=True, slots=True)
class Match:
    """What a state path names: its shape, address and key, its metrics template, and its handler (None: 405)."""

    shape: Shape
    address: Address
    key: str
    template: str
    handler: Handler | None


def segments(raw_path: bytes) -> list[str]:
    """The raw path's segments after ``/v0/``, each percent-decoded on its own (a ``%2F`` stays inside
    its segment). Bytes that are not UTF-8 become U+FFFD: no key or scope holds them, so they are refused."""
    rest = raw_path.split(b"?", 1)[0][len(b"/v0/") :]
    return [unquote_to_bytes(part).decode("utf-8", "replace") for part in rest.split(b"/")]


def is_state_path(raw_path: bytes) -> bool:
    """``/v0/state/…``, or a callers' prefix: ``/v0/{sessions|runs|agents|users}/{x}/state…``."""
    if raw_path.startswith(b"/v0/state/"):
        return True
    parts = raw_path.split(b"?", 1)[0].split(b"/", 5)
    return len(parts) >= 5 and parts[1] == b"v0" and parts[4] == b"state" and parts[2].decode("latin-1") in PREFIXES


def match_state(method: str, raw_path: bytes) -> Match | None:
    """The shape, address and handler of a state request; None when the path has no state shape (404)."""
    parts = segments(raw_path)
    kind, size, template = PREFIXES[parts[0]]
    prefix, rest = parts[:size], parts[size:]
    if len(prefix) < size or not all(prefix[1:]):
        return None
    address = _address(kind, prefix)
    if kind == "token" and prefix[1] == "batch" and not rest:
        return Match(BATCH, address, "", "/v0/state" + BATCH.tail, BATCH.handler(method))
    if rest in ([], [""]):
        shape, key = LIST, ""
    elif len(rest) == 1 or (len(rest) == 2 and rest[1] in ACTIONS):
        shape, key = (KEY if len(rest) == 1 else ACTIONS[rest[1]]), rest[0]
    else:
        return None
    return Match(shape, address, key, template + shape.tail, shape.handler(method))


def _address(kind: str, prefix: list[str]) -> Address:
    if kind == "token":
        return Address("token", scope=prefix[1])
    if kind in ("session", "user"):
        return Address(kind, id=prefix[1], agent=prefix[3])
    if kind == "run":
        return Address(kind, id=prefix[1])
    return Address(kind, agent=prefix[1])
