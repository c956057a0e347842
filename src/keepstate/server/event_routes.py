"""The run events routes: a worker's emit, and a run's events as a JSON page or a Server-Sent Events stream.

``GET /v0/runs/{id}/events`` answers ``text/event-stream`` when the request accepts it: one message per
event (``id: SEQ``, ``event: TYPE``, ``data: JSON``), from ``after`` or, on a reconnect, the
``Last-Event-ID`` header (which wins); a comment line when nothing came for the keep-alive period; the
stream ends after the run's final event. The rules are ``platform/run_events.py``'s.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..errors import InvalidRequest, KeepstateError
from ..platform.run_events import RunEvents
from ..protocol import DEFAULT_PAGE, MAX_PAGE
from ..stores.records import Emitted, StoredEvent
from ..stores.remembered import Answer
from . import idempotent
from .http import json_response, query_int
from .routes import invocation_write, key_caller, record_id, resource

log = logging.getLogger("keepstate.events")

SEQ_MAX = 2**62
EVENT_STREAM = "text/event-stream"
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""No cache may keep a stream, and no proxy (nginx) may buffer it."""
KEEPALIVE = b": keep-alive\n\n"


def run_events(request: Request) -> RunEvents:
    found: RunEvents = request.app.state.run_events
    return found


async def emit(request: Request) -> Response:
    return await invocation_write(request, run_events(request).emit, _emitted, one_write=True)


def _emitted(emitted: Emitted | None) -> Answer | None:
    if emitted is None:
        return None
    return idempotent.json_answer({"seq": emitted.seq, "cancel_requested": emitted.cancel_requested})


async def read(request: Request) -> Response:
    caller = await key_caller(request)
    run_id = record_id(request, "run_id")
    after = query_int(request, "after", 0, 0, SEQ_MAX)
    if request.method == "GET" and EVENT_STREAM in request.headers.get("accept", ""):
        after = last_event_id(request, after)
        batches = await run_events(request).open_stream(caller, run_id, after)
        return StreamingResponse(messages(batches), media_type=EVENT_STREAM, headers=STREAM_HEADERS)
    limit = query_int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
    events, following = await run_events(request).page(caller, run_id, after, limit)
    return json_response({"events": [event.public() for event in events], "next": following})


def last_event_id(request: Request, after: int) -> int:
    """Where a reconnecting stream goes on from: its ``Last-Event-ID``, else ``after``."""
    given = request.headers.get("last-event-id")
    if given is None or not given.strip():
        return after
    if not given.strip().isdigit() or len(given.strip()) > 18:
        raise InvalidRequest("Last-Event-ID must be the seq of an event")
    return int(given)


async def messages(batches: AsyncIterator[list[StoredEvent]]) -> AsyncIterator[bytes]:
    """Server-Sent Events: each event one message, an empty batch a comment line. A refusal once the
    stream has begun (the caller's key revoked, the store unreachable) can no longer be an error answer:
    the stream ends, and its client connects again from its last ``seq`` (and hears the refusal then)."""
    try:
        async for batch in batches:
            yield b"".join(message(event) for event in batch) if batch else KEEPALIVE
    except KeepstateError as error:
        log.warning("a run event stream ended early: %s", error)


def message(event: StoredEvent) -> bytes:
    """One event as a Server-Sent Events message (compact JSON holds no line break)."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (event.seq, event.type.encode(), orjson.dumps(event.public()))


EVENT_ROUTES = [
    resource("/v0/invocations/{inv_id}/events", POST=emit),
    resource("/v0/runs/{run_id}/events", GET=read),
]
