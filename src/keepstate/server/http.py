"""Request reading and response writing shared by every route: bodies, query parameters, JSON.

Bodies are counted while they stream in and refused with 413 ``too_large`` as soon as they pass
``MAX_BODY_BYTES`` (or at once when ``Content-Length`` says so), never read whole first. JSON is
parsed by ``keepstate.values.parse``, which refuses what the State API refuses with a JSON path;
a big body on a worker thread (``parse_body``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from .. import offload, values
from ..errors import InvalidRequest, TooLarge

JSON = "application/json"


def json_response(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status, headers, media_type=JSON)


def no_content() -> Response:
    return Response(status_code=204)


async def read_body(request: Request) -> bytes:
    """The raw body, refused with 413 once it passes the limit."""
    return await receive_body(request.receive, request.headers.get("content-length"))


async def receive_body(receive: Receive, declared: str | None) -> bytes:
    """The body from ASGI ``receive`` messages (``declared``: the Content-Length header), refused with
    413 once it passes the limit. Raw ASGI routes (``state_routes.py``) and Request routes both read here."""
    limit = values.MAX_BODY_BYTES
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"request body is {declared} bytes, over the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        if message["type"] != "http.request":
            continue
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"request body passes the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def json_object(request: Request, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object; an empty body is ``{}`` when the body is ``optional``."""
    return await parse_body(await read_body(request), optional)


OFF_LOOP_BYTES = 64 * 1024
"""Bodies from this size are parsed on a worker thread: a 2 MiB one costs milliseconds even at C
speed, and one refused at its first bad place tens of them, which the event loop must not wait out."""


async def parse_body(body: bytes, optional: bool = False) -> dict[str, Any]:
    """``parse_object``, off the event loop's thread for a big body."""
    if len(body) < OFF_LOOP_BYTES:
        return parse_object(body, optional)
    return await offload.run("parse", parse_object, body, optional)


def parse_object(body: bytes, optional: bool = False) -> dict[str, Any]:
    """A body as a JSON object; an empty body is ``{}`` when the body is ``optional``."""
    if not body.strip() and optional:
        return {}
    parsed = values.parse(body, values.MAX_DEPTH + 1)  # the value sits one level down
    if not isinstance(parsed, dict):
        raise InvalidRequest("the body must be a JSON object")
    return parsed


class HasQuery(Protocol):
    """A request's query string, parsed: a Starlette ``Request`` or a raw state route's ``StateCall``."""

    @property
    def query_params(self) -> Mapping[str, str]: ...


def query_int(request: HasQuery, name: str, default: int, low: int, high: int) -> int:
    """An integer query parameter; values above ``high`` are clamped, malformed ones are 400."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or len(text) > 18 or int(text) < low:
        raise InvalidRequest(f"{name} must be an integer of at least {low}")
    return min(int(text), high)


def query_seconds(request: HasQuery, name: str, high: float) -> float:
    """A duration in seconds (``wait``): a finite non-negative number, clamped to ``high``."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return 0.0
    try:
        number = float(text)
    except ValueError:
        raise InvalidRequest(f"{name} must be a number of seconds") from None
    if not math.isfinite(number) or number < 0:
        raise InvalidRequest(f"{name} must be a non-negative number of seconds")
    return min(number, high)


def body_seconds(body: dict[str, Any], name: str, high: float) -> float:
    value = body.get(name)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidRequest(f"{name} must be a non-negative number of seconds")
    return min(float(value), high)


def query_name(request: HasQuery, name: str) -> str | None:
    """A query filter in the key charset (ids, user names); malformed ones are 400."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    if not values.is_key(text):
        raise InvalidRequest(f"{name} must be 1-200 of A-Z a-z 0-9 . _ : -")
    return text
