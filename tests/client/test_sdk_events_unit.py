"""``runs.stream``'s rules against ``httpx.MockTransport``: each connection is scripted (events, then a
drop, a clean close or a refusal), so every way a connection can end happens by construction, and the
stream must still yield each event once, in seq order, and end only with the run. The sync and the
async client read the same scripts. The same against real servers: ``test_sdk_events.py``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

import keepstate
from keepstate.client import AsyncClient, Client, EventPage, RunEvent, _core, _events
from keepstate.client._events import SseParser
from keepstate.testing import Recorder, run_agent

RUN_ID = "run-1"
RUN: dict[str, Any] = {"id": RUN_ID, "agent": "chat", "status": "done", "session_id": None, "user": None}
RUN.update({"parent_id": None, "input": None, "output": None, "error": None, "hold": None, "decision": None})
RUN.update({"created_at": 1, "updated_at": 1})


def event(seq: int, type: str = "token", data: Any = None) -> dict[str, Any]:
    return {"seq": seq, "type": type, "data": f"t{seq}" if data is None else data, "at": 1000 + seq}


def status(seq: int, value: str) -> dict[str, Any]:
    return event(seq, "run.status", {"status": value})


def sse(item: dict[str, Any]) -> bytes:
    return f"id: {item['seq']}\nevent: {item['type']}\ndata: {json.dumps(item, ensure_ascii=False)}\n\n".encode()


class Dropped(httpx.SyncByteStream, httpx.AsyncByteStream):
    """An event stream's body: ``chunks``, then a drop (``drop``) or a clean end; records its closing."""

    def __init__(self, chunks: list[bytes], drop: bool) -> None:
        self.chunks, self.drop, self.closed = chunks, drop, False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.drop:
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class Connection:
    """One scripted connection: the events it sends, then a drop or a clean close; or a refusal."""

    events: list[dict[str, Any]] = field(default_factory=list)
    drop: bool = False
    status: int = 200
    refusal: dict[str, Any] | None = None
    comments: int = 0


@dataclass
class Script:
    """The server of a test: scripted connections, the run's status, and pages of events."""

    connections: list[Connection]
    run_status: str = "running"
    log: list[dict[str, Any]] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)
    bodies: list[Dropped] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == f"/v0/runs/{RUN_ID}":
            return httpx.Response(200, json={**RUN, "status": self.run_status})
        after = int(request.url.params.get("after", 0))
        if request.headers.get("accept") != "text/event-stream":
            events = [item for item in self.log if item["seq"] > after][:2]
            following = events[-1]["seq"] if len(events) == 2 else None
            return httpx.Response(200, json={"events": events, "next": following})
        connection = self.connections.pop(0)
        if connection.status != 200:
            return httpx.Response(connection.status, json=connection.refusal, headers={"retry-after": "0"})
        chunks = [b": keep-alive\n\n"] * connection.comments + [sse(item) for item in connection.events]
        body = Dropped(chunks, connection.drop)
        self.bodies.append(body)
        return httpx.Response(200, headers={"content-type": "text/event-stream; charset=utf-8"}, stream=body)

    def streams(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.headers.get("accept") == "text/event-stream"]


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reconnects at once: these tests are about what is yielded, never about how long it took."""
    monkeypatch.setattr(_core, "backoff", lambda attempt: 0.0)


def sync_seqs(script: Script, after: int = 0, take: int | None = None) -> list[int]:
    with Client("http://ks.test", key="k", transport=httpx.MockTransport(script)) as client:
        stream = client.runs.stream(RUN_ID, after=after)
        seqs = []
        for item in stream:
            seqs.append(item.seq)
            if take is not None and len(seqs) == take:
                stream.close()
        return seqs


async def async_seqs(script: Script, after: int = 0, take: int | None = None) -> list[int]:
    async with AsyncClient("http://ks.test", key="k", transport=httpx.MockTransport(script)) as client:
        stream = client.runs.stream(RUN_ID, after=after)
        seqs = []
        async for item in stream:
            seqs.append(item.seq)
            if take is not None and len(seqs) == take:
                await stream.aclose()
        return seqs


@pytest.fixture(params=["sync", "async"])
def seqs(request: pytest.FixtureRequest) -> Any:
    """Read a script's stream with the sync client or the async one: ``await seqs(script, ...)``."""

    async def read(script: Script, after: int = 0, take: int | None = None) -> list[int]:
        if request.param == "sync":
            return sync_seqs(script, after, take)
        return await async_seqs(script, after, take)

    return read


async def test_a_drop_resumes_after_the_last_seq_and_a_resent_event_is_not_yielded_again(seqs: Any) -> None:
    script = Script(
        [
            Connection([event(1), event(2)], drop=True),
            Connection([event(2), event(3), status(4, "done"), event(5, "run.output", {"output": 1})]),
        ]
    )
    assert await seqs(script) == [1, 2, 3, 4, 5]
    first, second = script.streams()
    assert "last-event-id" not in first.headers and "after" not in first.url.params
    assert second.headers["last-event-id"] == "2" and second.url.params["after"] == "2"


async def test_the_stream_waits_through_a_hold_and_a_clean_close_before_the_end(seqs: Any) -> None:
    """A server shutting down closes its streams cleanly: that is no end while the run goes on."""
    script = Script(
        [
            Connection([event(1), status(2, "held")], comments=2),
            Connection([status(3, "queued"), status(4, "running")], drop=True),
            Connection([event(5), status(6, "failed")]),
        ]
    )
    assert await seqs(script, after=0) == [1, 2, 3, 4, 5, 6]
    assert [r.headers.get("last-event-id") for r in script.streams()] == [None, "2", "4"]


async def test_a_stream_asked_past_the_end_of_an_ended_run_ends(seqs: Any) -> None:
    """The server closes at once a stream after a finished run's last event: the run is read, the
    events still past the last seq (one here, written before the run's status was read) are read as
    pages, and the stream ends instead of reconnecting for ever."""
    script = Script([Connection([])], run_status="done")
    script.log = [event(7), event(8), status(9, "done"), event(10, "run.output")]
    assert await seqs(script, after=8) == [9, 10]
    assert len(script.streams()) == 1


async def test_a_clean_close_with_nothing_new_on_a_running_run_reconnects(seqs: Any) -> None:
    script = Script([Connection([]), Connection([status(1, "cancelled")])], run_status="running")
    assert await seqs(script) == [1]


async def test_a_refusal_is_raised_as_its_class_and_not_retried(seqs: Any) -> None:
    refusal = {"error": "not_found", "message": "no such run"}
    script = Script([Connection(status=404, refusal=refusal)])
    with pytest.raises(keepstate.NotFound):
        await seqs(script)
    assert len(script.streams()) == 1


async def test_a_503_and_a_502_are_retried(seqs: Any) -> None:
    script = Script(
        [
            Connection(status=503, refusal={"error": "unavailable", "message": "busy", "retry_after": 0}),
            Connection(status=502, refusal={"error": "bad_gateway"}),
            Connection([status(1, "done")]),
        ]
    )
    assert await seqs(script) == [1]


async def test_reconnecting_gives_up_after_its_window(seqs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a clock that moves a second a reading, a window of half a second allows one more try after a
    connection that brought an event, and none after one that brought nothing."""
    ticks = iter(range(1000))
    monkeypatch.setattr(_events, "monotonic", lambda: float(next(ticks)))
    monkeypatch.setattr(_events, "RECONNECT_WINDOW", 0.5)
    script = Script([Connection([event(1)], drop=True), Connection(drop=True), Connection([status(2, "done")])])
    with pytest.raises(keepstate.Unavailable):
        await seqs(script)
    assert len(script.streams()) == 2


async def test_closing_the_iterator_closes_its_connection(seqs: Any) -> None:
    script = Script([Connection([event(1), event(2), event(3)], drop=True)])
    assert await seqs(script, take=2) == [1, 2]
    assert [body.closed for body in script.bodies] == [True]
    assert len(script.streams()) == 1


def test_events_reads_a_page() -> None:
    script = Script([])
    script.log = [event(1), event(2), event(3)]
    with Client("http://ks.test", key="k", transport=httpx.MockTransport(script)) as client:
        page = client.runs.events(RUN_ID, after=1, limit=2)
    assert page == EventPage([RunEvent(2, "token", "t2", 1002), RunEvent(3, "token", "t3", 1003)], 3)
    assert script.requests[0].url.params["after"] == "1"


def test_the_parser_follows_the_sse_rules() -> None:
    """Split anywhere (one byte at a time, inside a UTF-8 character too), lines ended by CR LF, CR or LF
    and by nothing else: U+2028, U+0085 and the other breaks of ``str.splitlines`` stay in the data."""
    parser = SseParser()
    text = ': hi\r\nid: 4\r\nevent: token\r\ndata: {"a":\rdata:  "\u2028\x85\u00e9"}\nretry: 9\r\n\r\n\ndata: x\n\n'
    raw = text.encode()
    found = [event for n in range(len(raw)) for event in parser.push(raw[n : n + 1])]
    assert found == [("4", "token", '{"a":\n "\u2028\x85\u00e9"}'), (None, "message", "x")]


async def test_data_with_the_line_breaks_json_leaves_unescaped_arrives_whole(seqs: Any) -> None:
    script = Script([Connection([event(1, data="a\u2028b\x85c\u2029"), status(2, "done")])])
    assert await seqs(script) == [1, 2]


def test_run_agent_records_what_the_agent_emits() -> None:
    def typing(inv: keepstate.Invocation) -> int:
        inv.emit("Hel", type="token")
        return inv.emit_many([{"type": "token", "data": "lo"}, {"data": {"done": True}}])

    recorder = Recorder()
    assert run_agent(typing, children=recorder) == 3
    assert [(e.seq, e.type, e.data) for e in recorder.events] == [
        (1, "token", "Hel"),
        (2, "token", "lo"),
        (3, "message", {"done": True}),
    ]
    with pytest.raises(keepstate.InvalidRequest):
        run_agent(lambda inv: inv.emit_many([{"text": "no data"}]))
    with pytest.raises(keepstate.InvalidValue):
        run_agent(lambda inv: inv.emit(float("nan")))
    for refused, error in [
        (lambda inv: inv.emit("x", type="Not A Type"), keepstate.InvalidRequest),
        (lambda inv: inv.emit("x", type="run.status"), keepstate.InvalidRequest),
        (lambda inv: inv.emit_many([]), keepstate.InvalidRequest),
        (lambda inv: inv.emit_many([{"data": n} for n in range(101)]), keepstate.TooLarge),
        (lambda inv: inv.emit("x" * 64 * 1024), keepstate.TooLarge),
    ]:
        with pytest.raises(error):
            run_agent(refused, children=recorder)
    assert len(recorder.events) == 3, "a refused emit records nothing"
