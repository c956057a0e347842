"""The I/O-free half of ``runs.stream``: Server-Sent Events parsed line by line, and the rules of a
stream that outlives its connections.

``client.runs.stream(run_id)`` reads ``GET /v0/runs/{id}/events`` as ``text/event-stream``. A
connection can end three ways, and only one of them ends the stream:

- the server closes it after the event that gives the run its final status (done, failed,
  cancelled, expired, interrupted): the run is over, so is the stream;
- it drops (a restart, a proxy, a read that waited past ``IDLE_LIMIT`` while the server promises a
  comment every 15 s): connect again, after a backoff, with ``Last-Event-ID`` the last seq yielded;
- the server closes it cleanly before a final status (a server shutting down gracefully): the same.
  When such a connection brought nothing new, the run may be over already (a stream asked from
  after its last event gets nothing and is closed at once): the run is read; if it ended, the
  events still after the last seq (if any) are read as pages, and the stream ends with them.

An event is yielded once, in seq order: one whose seq is not past the last yielded is dropped, so
neither a server resending nor a reconnect can repeat one, and every connection starts right after
the last one yielded, so none is skipped. Reconnecting gives up (``Unavailable``, the last error)
only when ``RECONNECT_WINDOW`` seconds passed without a connection that brought an event.

``EventStream`` holds that state and answers what to do next; ``_sync.py`` and ``_async.py`` do the
connecting, reading and sleeping, each in a few lines.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from time import monotonic
from typing import Any

import httpx
import orjson

from ..errors import KeepstateError, StoreClosed, Unavailable, from_wire
from . import _core, calls
from ._core import Call, Config, segment
from .records import EventPage, Run, RunEvent, ended

IDLE_LIMIT = 45.0
"""Seconds a stream's read may wait for a byte: three of the server's 15 s keep-alive comments."""
RECONNECT_WINDOW = 60.0
"""Seconds of failed reconnects (none bringing an event) after which the stream raises."""
EVENT_STREAM = "text/event-stream"


class SseParser:
    """Server-Sent Events, as the WHATWG rules read them, from bytes split anywhere: UTF-8, lines ended by
    CR LF, LF or CR alone (not by the other breaks ``str.splitlines`` knows, such as U+2028, which JSON
    leaves unescaped inside a string), fields ``id``, ``event``, ``data`` (lines joined with newlines),
    comments (``:``) and unknown fields ignored, an event dispatched at a blank line."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._id: str | None = None
        self._type = ""
        self._data: list[str] = []

    def push(self, chunk: bytes) -> list[tuple[str | None, str, str]]:
        """Take the next bytes; the events ``(id, type, data)`` they complete."""
        text = self._buffer + self._decoder.decode(chunk)
        found = []
        start = 0
        for end in _LINE_END.finditer(text):
            if end.group() == "\r" and end.end() == len(text):
                break  # its LF may come with the next chunk
            event = self.feed(text[start : end.start()])
            start = end.end()
            if event is not None:
                found.append(event)
        self._buffer = text[start:]
        return found

    def feed(self, line: str) -> tuple[str | None, str, str] | None:
        """Take one line (without its end); ``(id, type, data)`` when it completes an event."""
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._type = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> tuple[str | None, str, str] | None:
        found = (self._id, self._type or "message", "\n".join(self._data)) if self._data else None
        self._id, self._type, self._data = None, "", []
        return found


_LINE_END = re.compile("\r\n|\r|\n")


def parse_event(seq: str | None, kind: str, data: str) -> RunEvent:
    """A run event from one SSE message: its ``data`` is the event as JSON, ``{seq, type, data, at}``, as
    in a page (its ``id`` and ``event`` repeat the seq and the type)."""
    try:
        wire = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise KeepstateError(f"the event stream sent data that is not JSON: {data[:80]!r}") from error
    if not isinstance(wire, dict):
        raise KeepstateError(f"the event stream sent data that is not an event: {data[:80]!r}")
    return RunEvent.from_dict({"seq": seq, "type": kind, **wire})


class EventStream:
    """The state of one ``runs.stream``: the last seq yielded, and what the faces must do next."""

    def __init__(self, config: Config, run_id: str, after: int) -> None:
        if after < 0:
            raise ValueError("after must be a seq, 0 or more")
        self.config, self.run_id, self.last = config, run_id, int(after)
        self.parser = SseParser()
        self.over = False
        """True once an event gave the run its final status: a clean close then ends the stream."""
        self._connections = 0
        self._fresh = False
        self._failures = 0
        self._failing_since: float | None = None

    # -- one connection ------------------------------------------------------------------------

    def request(self) -> tuple[str, dict[str, str], dict[str, str]]:
        """The path, query and headers of the next connection: after the last seq yielded."""
        call: Call[Any] = Call("GET", f"/v0/runs/{segment(self.run_id)}/events", _core._keep)
        headers = {**call.headers(self.config), "accept": EVENT_STREAM, "cache-control": "no-cache"}
        if self._connections:
            headers["last-event-id"] = str(self.last)
        self._connections += 1
        self._fresh = False
        self.parser = SseParser()
        return call.path, _core.query(after=self.last or None), headers

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.config.timeout, read=max(self.config.timeout, IDLE_LIMIT))

    def opened(self, status: int, content_type: str | None, body: bytes = b"") -> None:
        """Check an answer's head (``body``: a refusal's, read whole): an error the server sent is raised
        as its class (``retry_in`` tells which to reconnect after); a 200 that is not a stream is one too."""
        if status != 200:
            raise from_wire(status, _core.decode(body))
        if not (content_type or "").startswith(EVENT_STREAM):
            raise KeepstateError(f"the server answered {content_type!r} where an event stream was asked")

    def feed(self, chunk: bytes) -> Iterator[RunEvent]:
        """The next bytes of the stream; the events they complete that are past the last seq (each taken
        as the last only once it is yielded)."""
        for found in self.parser.push(chunk):
            if (event := self.take(parse_event(*found))) is not None:
                yield event

    def take(self, event: RunEvent) -> RunEvent | None:
        """``event`` when it is past the last seq yielded (and then it is the last), else None."""
        if event.seq <= self.last:
            return None
        self.last, self._fresh = event.seq, True
        self._failures, self._failing_since = 0, None
        self.over = self.over or event.final
        return event

    # -- between connections -------------------------------------------------------------------

    def closed_cleanly(self) -> bool:
        """The server ended the connection: True when that ends the stream. Else the faces decide with
        ``needs_check`` whether to read the run first, then ``retry_in``."""
        return self.over

    def needs_check(self) -> bool:
        """A clean close that brought nothing new: the run may have ended before this connection."""
        return not self._fresh

    def checked(self, run: Run) -> bool:
        """After ``needs_check``: True when the run has ended (the faces then ``drain`` and stop)."""
        return ended(run.status)

    def drain_call(self) -> Call[EventPage]:
        return calls.run_events(self.run_id, self.last, None)

    def drained(self, page: EventPage) -> tuple[list[RunEvent], bool]:
        """The events of a page not yet yielded, and whether it was the last page."""
        fresh = [event for event in page.events if self.take(event) is not None]
        return fresh, page.next is None or not page.events

    def retry_in(self, error: KeepstateError | None = None) -> float:
        """Seconds to wait before connecting again after a failed or closed connection; raises ``error``
        when it cannot be retried, or once reconnecting has failed for ``RECONNECT_WINDOW`` seconds."""
        if error is not None and not retryable(error):
            raise error
        now = monotonic()
        if self._fresh:
            self._failures, self._failing_since = 0, None
        if self._failing_since is None:
            self._failing_since = now
        if error is not None and now - self._failing_since > RECONNECT_WINDOW:
            raise error
        wait = _core.backoff(self._failures)
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after > 0:
            wait = max(wait, min(float(retry_after), _core.MAX_RETRY_AFTER))
        self._failures += 1
        return wait


def dropped(error: httpx.TransportError, config: Config) -> Unavailable:
    """A connection that failed or dropped, as ``Unavailable`` with no ``retry_after`` of its own (no
    server said when to come back: the stream's backoff decides)."""
    return Unavailable(_core.transport_error(error, config).message, retry_after=0)


def retryable(error: KeepstateError) -> bool:
    """A stream reconnects after a server it cannot reach, or one that answers 502/503/504 (not after
    its own client was closed)."""
    if isinstance(error, StoreClosed):
        return False
    return isinstance(error, Unavailable) or error.status in _core.RETRY_STATUSES
