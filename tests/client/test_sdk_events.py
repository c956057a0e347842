"""Run events through the SDK against real ``keepstate serve`` processes: a worker emits, a caller streams.

Every overlap here is made, not hoped for: an agent emits part of its events, then waits on an event
the test sets only once the stream has yielded them, so the stream is live (not a replay of a finished
log) when the rest come; the server is killed only after the stream yielded the first part, and the
rest is emitted only once the server has started again. No assertion is about how long anything took;
waits are bounded by HANG_S so a broken promise fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sdk_helpers import Keys, make_key

import keepstate
from keepstate.client import AsyncClient, AsyncInvocation, AsyncWorker, Client, Invocation, Run, RunEvent, Worker
from keepstate.client._events import EventStream
from serverproc import ServerInfo, running_server

HANG_S = 60
LONG_LEASE_S = 3600
"""No heartbeat comes within a test (the first is a third of the lease away): a cancel can only be
seen through an emit's answer, and no stall of a loaded machine loses a lease."""
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """This module's server (in place of conftest's, whose lease is 3 s): SQLite, an hour's lease."""
    path = tmp_path_factory.mktemp("sdk-events") / "server.db"
    with running_server(f"sqlite:///{path}", lease=LONG_LEASE_S) as info:
        yield info


def serve_once(worker: Worker) -> threading.Thread:
    """Run one invocation of ``worker`` in a thread (its claim waits until a run is there)."""

    def run() -> None:
        while not worker.poll_once(wait=1):
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@contextmanager
def one_run(
    server: ServerInfo, keys: Keys, agent: str, fn: Callable[[Invocation], Any]
) -> Iterator[tuple[Client, Run]]:
    """A run of ``agent``, which ``fn`` serves once in a thread; the member's client and the run. The
    worker's thread is joined at the end."""
    worker = Worker(server.url, key=keys.worker, claim_wait=1)
    worker.agent(agent)(fn)
    thread = serve_once(worker)
    try:
        with Client(server.url, key=keys.member) as client:
            yield client, client.runs.start(agent)
    finally:
        thread.join(HANG_S)
        worker.close()


def mine(events: list[RunEvent]) -> list[tuple[str, Any]]:
    """The events a worker emitted (not the platform's ``run.*``), as (type, data)."""
    return [(e.type, e.data) for e in events if not e.type.startswith("run.")]


def assert_whole_log(events: list[RunEvent], output: Any) -> None:
    """Each seq once, from 1, none missing; the run's output, then its final status, last."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), [e.seq for e in events]
    assert [(e.type, e.data) for e in events[-2:]] == [
        ("run.output", {"output": output}),
        ("run.status", {"status": "done"}),
    ]
    assert all(isinstance(e.at, int) for e in events)


def test_a_caller_streams_a_workers_events_live_in_order_and_the_stream_ends_with_the_run(
    sdk_server: ServerInfo, keys: Keys, agent_name: str
) -> None:
    halfway = threading.Event()
    seqs: list[int] = []

    def typing(inv: Invocation) -> str:
        seqs.append(inv.emit("Hel", type="token"))
        seqs.append(inv.emit_many([{"type": "token", "data": "lo"}, {"type": "token", "data": " wor"}]))
        assert halfway.wait(HANG_S), "the stream never yielded the first tokens"
        seqs.append(inv.emit_many([{"type": "token", "data": "ld"}, {"data": {"done": True}}]))
        return "Hello world"

    events = []
    with one_run(sdk_server, keys, agent_name, typing) as (client, run):
        for event in client.runs.stream(run.id):
            events.append(event)
            if len(mine(events)) == 3:
                halfway.set()  # only now does the agent write the rest: they reach a live stream
    assert mine(events) == [
        ("token", "Hel"),
        ("token", "lo"),
        ("token", " wor"),
        ("token", "ld"),
        ("message", {"done": True}),
    ]
    assert_whole_log(events, "Hello world")
    by_data = {e.data: e.seq for e in events if e.type == "token"}
    assert seqs == [by_data["Hel"], by_data[" wor"], by_data["ld"] + 1]  # each emit's answer: its last seq
    assert [e.data["status"] for e in events if e.type == "run.status"][-2:] == ["running", "done"]


async def test_async_emit_and_async_stream(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    halfway = asyncio.Event()
    worker = AsyncWorker(sdk_server.url, key=keys.worker, claim_wait=1)

    @worker.agent(agent_name)
    async def typing(inv: AsyncInvocation) -> int:
        await inv.emit("a", type="token")
        await asyncio.wait_for(halfway.wait(), HANG_S)
        return await inv.emit_many([{"type": "token", "data": "b"}])

    async with AsyncClient(sdk_server.url, key=keys.member) as client:
        run = await client.runs.start(agent_name)
        served = asyncio.create_task(worker.poll_once(wait=HANG_S))
        events = []
        async for event in client.runs.stream(run.id):
            events.append(event)
            if mine(events) == [("token", "a")]:
                halfway.set()
        assert await served
        page = await client.runs.events(run.id)
    await worker.aclose()
    assert mine(events) == [("token", "a"), ("token", "b")]
    seq_of_b = next(e.seq for e in events if e.data == "b")
    assert_whole_log(events, seq_of_b)
    assert page.events == events and page.next is None


def test_reading_from_after_a_seq_as_a_stream_and_as_pages(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    def count(inv: Invocation) -> int:
        return inv.emit_many([{"type": "n", "data": n} for n in range(10)])

    with one_run(sdk_server, keys, agent_name, count) as (client, run):
        assert client.runs.wait(run.id, timeout=HANG_S).status == "done"
        whole = list(client.runs.stream(run.id))
        assert_whole_log(whole, whole[-3].seq)
        assert list(client.runs.stream(run.id, after=4)) == whole[4:]
        assert list(client.runs.stream(run.id, after=whole[-1].seq)) == []  # the run ended: nothing, at once
        paged: list[RunEvent] = []
        after = 0
        while True:
            page = client.runs.events(run.id, after=after, limit=4)
            paged.extend(page.events)
            assert len(page.events) <= 4
            if page.next is None:
                break
            after = page.next
        assert paged == whole
        assert client.runs.events(run.id, after=3, limit=2).events == whole[3:5]
        other = Client(sdk_server.url, key=make_key(sdk_server, "member"))
        with pytest.raises(keepstate.NotFound):
            other.runs.events(run.id)
        with pytest.raises(keepstate.NotFound):
            next(other.runs.stream(run.id))
        other.close()


def test_an_emits_answer_brings_a_cancel_to_the_agent(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    """No heartbeat comes within an hour's lease: only the second emit's answer can bring the cancel."""
    cancelled = threading.Event()
    seen: list[bool] = []

    def patient(inv: Invocation) -> str:
        inv.emit("started")
        seen.append(inv.cancel_requested)
        assert cancelled.wait(HANG_S)
        inv.emit("still here")
        seen.append(inv.cancel_requested)
        if inv.cancel_requested:
            raise RuntimeError("stopped: cancelled")  # an end other than a result: the run is cancelled
        return "never cancelled"

    with one_run(sdk_server, keys, agent_name, patient) as (client, run):
        for event in client.runs.stream(run.id):
            if event.data == "started":
                assert client.runs.cancel(run.id).cancel_requested
                cancelled.set()
        final = client.runs.get(run.id)
    assert seen == [False, True]
    assert final.status == "cancelled"


def test_refused_emits_raise_the_sdks_errors_and_write_nothing(
    sdk_server: ServerInfo, keys: Keys, agent_name: str
) -> None:
    refused: dict[str, type[BaseException]] = {}

    def refuse(inv: Invocation) -> int:
        attempts: dict[str, Callable[[], object]] = {
            "101 events": lambda: inv.emit_many([{"data": n} for n in range(101)]),
            "a bad type": lambda: inv.emit("x", type="Not A Type"),
            "a platform type": lambda: inv.emit("x", type="run.status"),
            "an empty type": lambda: inv.emit("x", type=""),
            "data over 64 KiB": lambda: inv.emit("x" * (64 * 1024 + 1)),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
            except keepstate.KeepstateError as error:
                refused[name] = type(error)
        return inv.emit_many([{"data": n} for n in range(100)])  # 100 is allowed

    with one_run(sdk_server, keys, agent_name, refuse) as (client, run):
        run = client.runs.wait(run.id, timeout=HANG_S)
        events = list(client.runs.stream(run.id))
    assert refused == {
        "101 events": keepstate.TooLarge,
        "a bad type": keepstate.InvalidRequest,
        "a platform type": keepstate.InvalidRequest,
        "an empty type": keepstate.InvalidRequest,
        "data over 64 KiB": keepstate.TooLarge,
    }
    assert run.status == "done"
    assert [e.data for e in events if e.type == "message"] == list(range(100))


def test_a_stream_resumes_across_a_server_killed_and_started_again(
    tmp_path: Path, agent_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server dies (SIGKILL) once the stream has yielded the first part; it comes back on the same
    SQLite file and port; only then does the agent write the rest. The stream, reading in a thread all
    along, reconnects by itself (refused until the new server listens) with Last-Event-ID, and yields
    the rest: every seq once, none missing."""
    store = f"sqlite:///{tmp_path / 'server.db'}"
    first_part, restarted = threading.Event(), threading.Event()
    resumed_from: list[str | None] = []
    request = EventStream.request

    def recorded(stream: EventStream) -> tuple[str, dict[str, str], dict[str, str]]:
        path, params, headers = request(stream)
        resumed_from.append(headers.get("last-event-id"))
        return path, params, headers

    monkeypatch.setattr(EventStream, "request", recorded)
    events: list[RunEvent] = []
    failures: list[BaseException] = []

    def typing(inv: Invocation) -> str:
        inv.emit_many([{"type": "token", "data": t} for t in ("a", "b", "c")])
        assert restarted.wait(HANG_S), "the server was never started again"
        inv.emit_many([{"type": "token", "data": t} for t in ("d", "e")])
        inv.emit("f", type="token")
        return "abcdef"

    def read(client: Client, run_id: str) -> None:
        try:
            for event in client.runs.stream(run_id):
                events.append(event)
                if event.data == "c":
                    first_part.set()
        except BaseException as error:  # the test thread asserts on it
            failures.append(error)
            first_part.set()

    with running_server(store, lease=LONG_LEASE_S) as first:
        admin_key, url, port = first.admin_key, first.url, int(first.url.rsplit(":", 1)[1])
        keys = Keys(member=make_key(first, "member"), worker=make_key(first, "worker"))
        worker = Worker(url, key=keys.worker, claim_wait=1)
        worker.agent(agent_name)(typing)
        serving = serve_once(worker)
        client = Client(url, key=keys.member)
        run = client.runs.start(agent_name)
        reader = threading.Thread(target=read, args=(client, run.id), daemon=True)
        reader.start()
        assert first_part.wait(HANG_S) and not failures, failures
        first.process.kill()  # no goodbye: the stream's connection just drops
        first.process.wait()
    with running_server(store, admin_key=admin_key, lease=LONG_LEASE_S, port=port):
        restarted.set()
        serving.join(HANG_S)
        reader.join(HANG_S)
        assert not reader.is_alive(), "the stream did not end with the run"
        assert not failures, failures
        assert client.runs.get(run.id).status == "done"
    client.close()
    worker.close()
    assert [e.data for e in events if e.type == "token"] == list("abcdef")
    assert_whole_log(events, "abcdef")
    seq_of_c = next(e.seq for e in events if e.data == "c")
    assert resumed_from[0] is None and resumed_from[1:] and set(resumed_from[1:]) == {str(seq_of_c)}


def test_a_stream_on_one_server_gets_what_a_worker_emits_through_another(pg_url: str, agent_name: str) -> None:
    """Two servers on one PostgreSQL: the worker talks to the first, the caller streams from the second;
    the rest is written only once the second's stream has yielded the first part, so it must cross."""
    key = f"ks_pair_{secrets.token_urlsafe(24)}"
    halfway = threading.Event()
    with (
        running_server(pg_url, admin_key=key, lease=LONG_LEASE_S) as first,
        running_server(pg_url, admin_key=key, lease=LONG_LEASE_S) as second,
    ):
        keys = Keys(member=make_key(first, "member"), worker=make_key(first, "worker"))

        def typing(inv: Invocation) -> str:
            inv.emit_many([{"type": "token", "data": t} for t in ("a", "b")])
            assert halfway.wait(HANG_S), "the other server's stream never yielded the first part"
            inv.emit_many([{"type": "token", "data": t} for t in ("c", "d")])
            return "abcd"

        events = []
        with one_run(first, keys, agent_name, typing) as (_, run), Client(second.url, key=keys.member) as client:
            for event in client.runs.stream(run.id):
                events.append(event)
                if event.data == "b":
                    halfway.set()
    assert [e.data for e in events if e.type == "token"] == list("abcd")
    assert_whole_log(events, "abcd")


def test_a_stream_stays_open_through_a_hold_and_the_resume(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    """The decision is given only once the stream has yielded the hold: the same stream then yields the
    resume's events and ends with it."""

    def approve(inv: Invocation) -> str:
        if inv.kind == "start":
            inv.emit("asking")
            inv.hold({"question": "go?"})
        inv.emit("going")
        return "went"

    worker = Worker(sdk_server.url, key=keys.worker, claim_wait=1)
    worker.agent(agent_name)(approve)
    events = []
    with one_run(sdk_server, keys, agent_name, approve) as (client, run):
        for event in client.runs.stream(run.id):
            events.append(event)
            if event.data == {"status": "held"}:
                client.runs.decide(run.id, approved=True)
                serve_once(worker).join(HANG_S)
    worker.close()
    assert [e.data for e in events if e.type == "message"] == ["asking", "going"]
    statuses = [e.data["status"] for e in events if e.type == "run.status"]
    assert statuses == ["queued", "running", "held", "queued", "running", "done"]
    assert_whole_log(events, "went")


ABANDONING = """
import asyncio, sys
from keepstate.client import AsyncClient

async def main() -> None:
    client = AsyncClient(sys.argv[1], key=sys.argv[2])
    async for event in client.runs.stream(sys.argv[3]):
        print(event.seq, flush=True)
        break  # left inside its async for, never closed: the loop's shutdown closes it

asyncio.run(main())
"""


def test_an_async_stream_left_open_ends_quietly_with_its_loop(
    sdk_server: ServerInfo, keys: Keys, agent_name: str
) -> None:
    """A program that leaves ``async for`` over a stream and ends its ``asyncio.run`` gets no error from the
    loop's closing of the stream (nested async generators once made it log "already running")."""
    with Client(sdk_server.url, key=keys.member) as client:
        run = client.runs.start(agent_name, None)  # queued: its stream stays open after the first event
        ended = subprocess.run(
            [sys.executable, "-c", ABANDONING, sdk_server.url, keys.member, run.id],
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        client.runs.cancel(run.id)
    assert (ended.returncode, ended.stdout) == (0, "1\n"), ended.stderr
    assert "Traceback" not in ended.stderr and "error" not in ended.stderr.lower(), ended.stderr
