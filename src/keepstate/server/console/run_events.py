"""A run's events in the console: the Events table of a run's page, and the stream its script follows.

Both read the server's ``RunEvents`` (``platform/run_events.py``) as ``GET /v0/runs/{id}/events`` does,
for a run the signed-in caller may see (a member's own runs, an admin's environment: the table is of the
run its page read with the caller, the stream checks the caller itself): the same log, the same waiters
(an idle stream costs its registration and a keep-alive).

**The table** shows a page of ``EVENTS_PAGE`` events. Without ``?events_after=`` it is the log's last
page, which is what a person opening a running run wants: the log's length is found with one-event
reads (a run's ``seq`` runs 1, 2, 3… without a gap, and a read sees a prefix of the log), by doubling
then halving: about 15 reads of one event for the 10,000 a run may hold, none for a log of one page.

**The stream** (``/console/runs/{id}/events``) is for the browser's ``EventSource``, which cannot send an
``Authorization`` header: it is signed in by the console's cookie, like every console page. Its messages
are the API's stream's without their ``event:`` line (an EventSource hands a message of a named type
only to a listener of that name, and the types are the workers'): ``id: SEQ`` and ``data:`` the event
``{seq, type, data, at}``. It starts after ``?after=`` or, when the EventSource reconnects, after its
``Last-Event-ID`` (which wins), so a dropped connection resumes with the next event, none twice. It ends
after the run's final event; a reconnect after that gets 204, which tells an EventSource to stop. A
browser signed out meanwhile (sign-out, a revoked key) is noticed within ``SIGN_IN_CHECK_S`` at an event
or keep-alive and the stream ends; its reconnect gets 401, which also stops the EventSource.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ...errors import InvalidRequest, KeepstateError
from ...platform.run_events import RunEvents
from ...stores.records import FINAL, StoredEvent, StoredRun
from ..event_routes import EVENT_STREAM, KEEPALIVE, STREAM_HEADERS, last_event_id
from ..routes import record_id
from . import auth, render, views
from .auth import SignedIn
from .context import platform_of

EVENTS_PAGE = 100
"""Events of a run's page."""
RETRY_MS = 1000
"""How soon an EventSource connects again after a dropped connection (its default is a few seconds)."""
SEQ_DIGITS = 18
HEADERS = {**STREAM_HEADERS, **render.PRIVATE}
"""A stream's: the console's (``no-store`` among them), and no proxy buffering."""
SIGN_IN_CHECK_S = 10.0
"""A stream reads its browser's console session again at most this often (it ends when signed out)."""


@dataclass(frozen=True, slots=True)
class EventsView:
    """The Events table of a run's page: its rows; ``last``, the seq the stream goes on after; the
    cursors of the pages before and after (None: there is none); ``follow``: the page ends the log and
    the run can still change, so the script follows the stream."""

    rows: list[views.EventRow]
    last: int
    earlier: str | None
    later: str | None
    follow: bool


def run_events_of(request: Request) -> RunEvents:
    found: RunEvents = request.app.state.run_events
    return found


def seq_query(request: Request, name: str) -> int | None:
    """A seq the request's query names (``events_after`` of a run's page, ``after`` of its stream)."""
    text = request.query_params.get(name)
    if text is None:
        return None
    if not text.isdecimal() or not text.isascii() or len(text) > SEQ_DIGITS:
        raise InvalidRequest(f"{name} must be the seq of an event")
    return int(text)


async def events_view(request: Request, run: StoredRun) -> EventsView:
    """The page of ``run``'s events its page shows. ``run`` is the one the caller's page read
    (``Platform.get_run``: the caller may see it), before its events: a final status read first means
    the events read next hold the final event."""
    log = run_events_of(request).log
    wanted = seq_query(request, "events_after")  # None: the log's last page
    start = wanted or 0
    found = await log.read(run.id, start, EVENTS_PAGE + 1)
    if wanted is None and len(found) > EVENTS_PAGE:
        start = await tail_start(run_events_of(request), run.id)
        found = await log.read(run.id, start, EVENTS_PAGE + 1)
    shown = found[:EVENTS_PAGE]
    last = shown[-1].seq if shown else start
    more = len(found) > EVENTS_PAGE
    return EventsView(
        [views.event_row(event) for event in shown],
        last,
        str(max(0, start - EVENTS_PAGE)) if start > 0 else None,
        str(last) if more else None,
        not more and run.status not in FINAL,
    )


async def tail_start(events: RunEvents, run_id: str) -> int:
    """Where the last page of a log longer than a page starts (the ``after`` that reads it)."""

    async def holds(seq: int) -> bool:
        return bool(await events.log.read(run_id, seq - 1, 1))

    low, high = EVENTS_PAGE + 1, 2 * EVENTS_PAGE + 1  # low: a seq the log holds; high: one it may not
    while await holds(high):
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if await holds(middle) else (low, middle)
    return low - EVENTS_PAGE


# ---------------------------------------------------------------- the stream


async def stream(request: Request, signed: SignedIn) -> Response:
    """``/console/runs/{id}/events``: the run's events as Server-Sent Events for the run's page."""
    run_id = record_id(request, "run_id")
    events = run_events_of(request)
    after = last_event_id(request, seq_query(request, "after") or 0)
    found, following = await events.page(signed.caller, run_id, after, 1)
    if not found and following is None:
        return Response(status_code=204, headers=render.PRIVATE)  # the log is over: stop asking
    if request.method == "HEAD":
        return Response(headers=HEADERS, media_type=EVENT_STREAM)
    batches = await events.open_stream(signed.caller, run_id, after)
    return StreamingResponse(
        messages(request, signed, batches),
        media_type=EVENT_STREAM,
        headers=HEADERS,
    )


async def messages(
    request: Request, signed: SignedIn, batches: AsyncIterator[list[StoredEvent]]
) -> AsyncIterator[bytes]:
    """The stream's bytes: how soon to reconnect, then each event, a comment when idle. It ends when the
    browser's console session does, checked again with a batch or keep-alive at most every
    ``SIGN_IN_CHECK_S`` (the key itself is checked with every batch of events, as for the API), and
    quietly on any refusal once it has begun (it can no longer be an error answer)."""
    yield b"retry: %d\n\n" % RETRY_MS
    platform = platform_of(request)
    checked = time.monotonic()
    try:
        async for batch in batches:
            if time.monotonic() - checked >= SIGN_IN_CHECK_S:
                await auth.signed_in(platform, request)
                checked = time.monotonic()
            yield b"".join(message(event) for event in batch) if batch else KEEPALIVE
    except KeepstateError:
        return  # signed out, a revoked key, the store gone: the stream ends; a reconnect hears why


def message(event: StoredEvent) -> bytes:
    """One event as a message without a type line (compact JSON holds no line break)."""
    return b"id: %d\ndata: %s\n\n" % (event.seq, orjson.dumps(event.public()))
