"""Run events across two ``keepstate serve`` processes sharing one store (one SQLite file, one PostgreSQL
database): what is written through one server streams from the other in ``seq`` order, none skipped, none
twice — also when the client reconnects to the other server with ``Last-Event-ID``, and (PostgreSQL) when a
server's listening connection is lost and comes back. Several processes emitting into one run at once get
``seq`` 1..N without a gap.

The streams' ends are what is awaited (a stream ends after its run's final event), never a duration.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from emitters import emit_from_processes
from server_helpers import Api, token
from sse import Message, Stream

from backends import declaring, fresh_url
from event_sinks import listeners
from serverproc import ServerInfo, running_server

KEEPALIVE = {"KEEPSTATE_EVENTS_KEEPALIVE": "0.5"}
HANG_S = 60.0


def pair(url: str) -> Any:
    admin = f"ks_test_{secrets.token_urlsafe(24)}"
    return running_server(url, admin, extra_env=KEEPALIVE), running_server(url, admin, extra_env=KEEPALIVE)


@pytest.fixture(scope="module", params=declaring("platform", "shared"))
def servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerInfo]]:
    folder: Path = tmp_path_factory.mktemp("two")
    with fresh_url(request.param, folder) as url:
        first, second = pair(url)
        with first as a, second as b:
            yield [a, b]


@pytest.fixture(scope="module")
def pg_servers() -> Iterator[list[ServerInfo]]:
    with fresh_url("postgres", Path()) as url:
        first, second = pair(url)
        with first as a, second as b:
            yield [a, b]


class Two:
    """A client of server A (``a``, an ``Api``) and the same credentials on server B (``b``)."""

    def __init__(self, servers: list[ServerInfo]) -> None:
        self.a = Api(servers[0])
        self.b = httpx.Client(base_url=servers[1].url, timeout=60)
        self.urls = [server.url for server in servers]

    def stream(self, server: int, run_id: str, **headers: str) -> Stream:
        return Stream(self.urls[server], f"/v0/runs/{run_id}/events", {**self.a.member, **headers})

    def emit(self, inv: dict[str, Any], *data: Any) -> int:
        answer = self.a.http.post(
            f"/v0/invocations/{inv['id']}/events",
            json={"events": [{"data": item} for item in data]},
            headers=token(inv["token"]),
        )
        assert answer.status_code == 200, answer.text
        seq: int = answer.json()["seq"]
        return seq

    def log(self, run_id: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        after: int | None = 0
        while after is not None:
            answer = self.b.get(f"/v0/runs/{run_id}/events", params={"after": after}, headers=self.a.member).json()
            events += answer["events"]
            after = answer["next"]
        return events

    def close(self) -> None:
        self.a.close()
        self.b.close()


@pytest.fixture
def two(servers: list[ServerInfo]) -> Iterator[Two]:
    client = Two(servers)
    yield client
    client.close()


@pytest.fixture
def pg_two(pg_servers: list[ServerInfo]) -> Iterator[Two]:
    client = Two(pg_servers)
    yield client
    client.close()


def in_order(messages: list[Message], first: int = 1) -> list[int]:
    ids = [m.id for m in messages if m.id is not None]
    assert ids == list(range(first, first + len(ids))), ids
    return ids


def test_what_one_server_writes_streams_from_the_other_through_hold_and_resume(two: Two) -> None:
    run = two.a.start("ev-two")
    with two.stream(1, run["id"]) as stream:
        inv = two.a.claim("ev-two")
        for n in range(20):
            two.emit(inv, *(f"{n}.{part}" for part in range(5)))
        two.a.end(inv, kind="hold", request=None)
        assert two.b.post(f"/v0/runs/{run['id']}/decision", json={"approved": True}, headers=two.a.member).is_success
        resumed = two.a.claim("ev-two")
        two.emit(resumed, "again")
        two.a.end(resumed, output={"n": 1})
        got = stream.rest()
    in_order(got)
    assert [m.data for m in got] == two.log(run["id"])
    assert [m.data["data"] for m in got if m.event == "message"] == [
        *(f"{n}.{part}" for n in range(20) for part in range(5)),
        "again",
    ]
    assert got[-1].data["data"] == {"status": "done"}


def test_a_client_goes_on_from_its_last_event_id_on_the_other_server(two: Two) -> None:
    run = two.a.start("ev-switch")
    inv = two.a.claim("ev-switch")
    two.emit(inv, *range(10))  # seqs 3..12
    with two.stream(1, run["id"]) as first:
        seen = first.events(7)
    two.emit(inv, *range(10, 20))  # 13..22, while nobody streams
    with two.stream(0, run["id"], **{"Last-Event-ID": str(seen[-1].id)}) as second:
        more = second.events(5)
        two.emit(inv, *range(20, 25))
        two.a.end(inv, kind="fail", error={"type": "E", "message": "stop"})
        more += second.rest()
    in_order(seen + more)
    assert [m.data for m in seen + more] == two.log(run["id"])


def test_deleting_a_session_through_one_server_ends_a_held_runs_stream_on_the_other(two: Two) -> None:
    session_id = two.a.session()
    run = two.a.start("ev-gone", session_id=session_id)
    inv = two.a.claim("ev-gone")
    two.emit(inv, "before the hold")
    two.a.end(inv, kind="hold", request=None)
    with two.stream(1, run["id"]) as stream:
        assert [m.id for m in stream.events(4)] == [1, 2, 3, 4]
        assert two.a.http.delete(f"/v0/sessions/{session_id}", headers=two.a.member).status_code == 204
        assert stream.rest() == []  # the run was cancelled, its events went with the session
    assert two.log(run["id"]) == []


def until(condition: Any) -> None:
    """Until ``condition()`` holds; the deadline only catches a hang."""
    give_up = time.monotonic() + HANG_S
    while not condition():
        assert time.monotonic() < give_up, "never happened"
        time.sleep(0.05)


def test_a_servers_lost_listening_connection_loses_no_event(pg_two: Two, pg_servers: list[ServerInfo]) -> None:
    run = pg_two.a.start("ev-listen")
    inv = pg_two.a.claim("ev-listen")
    b = pg_servers[1].process.pid
    with pg_two.stream(1, run["id"]) as stream:
        pg_two.emit(inv, "before")
        assert [m.id for m in stream.events(3)] == [1, 2, 3]
        assert listeners(b, cut=True) == 1
        pg_two.emit(inv, *range(5))  # while B listens again, or not yet: B reads them either way
        until(lambda: listeners(b) == 1)
        caught_up = stream.events(5)  # nothing else is written until they came
        pg_two.emit(inv, "after")
        pg_two.a.end(inv, output=None)
        got = caught_up + stream.rest()
    in_order(got, first=4)
    assert [m.data["data"] for m in got] == [0, 1, 2, 3, 4, "after", {"output": None}, {"status": "done"}]


def test_processes_emitting_into_one_run_at_once_get_seqs_without_a_gap(pg_two: Two) -> None:
    run = pg_two.a.start("ev-many")
    inv = pg_two.a.claim("ev-many")
    with pg_two.stream(1, run["id"]) as stream:
        answered = emit_from_processes(pg_two.urls, inv["id"], inv["token"], writers=4, calls=25)
        pg_two.a.end(inv, output=None)
        streamed = stream.rest()
    log = pg_two.log(run["id"])
    assert [event["seq"] for event in log] == list(range(1, 2 + 400 + 3))
    assert [m.data for m in streamed] == log
    parts = {event["seq"]: tuple(event["data"]) for event in log if event["type"] == "part"}
    assert sorted(parts.values()) == sorted((w, c, n) for w in range(4) for c in range(25) for n in range(4))
    for writer, call, seq in answered:  # each emit's four events together, in order, ending at its seq
        assert [parts[s] for s in range(seq - 3, seq + 1)] == [(writer, call, n) for n in range(4)]
