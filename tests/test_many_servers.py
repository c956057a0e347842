"""Two ``keepstate serve`` processes on one PostgreSQL: every guarantee holds across them.

Each test starts two real server processes on the same fresh schema with the same admin key (as
behind a load balancer) and drives them from threads that alternate between the two, so the
races happen in PostgreSQL between processes, not inside one event loop: one turn per session,
each queued run claimed once, exact compare-and-set and appends, run tokens valid on either
server, a lost lease handled once and seen the same by both.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any, TypeVar

import httpx
import pytest

from serverproc import ServerInfo, running_server

T = TypeVar("T")
Pair = tuple[ServerInfo, ServerInfo]
HANG_S = 60
"""Bounds a request or a wait for something that must happen, so a broken server fails instead of hanging."""
LONG_LEASE_S = 3600
"""An invocation lease no stall of a loaded machine outlives (a test's calls go on while nobody beats)."""


def start_pair(pg_url: str, lease: float = LONG_LEASE_S) -> Iterator[Pair]:
    key = f"ks_pair_{secrets.token_urlsafe(24)}"
    with ExitStack() as stack:
        first = stack.enter_context(running_server(pg_url, admin_key=key, lease=lease))
        second = stack.enter_context(running_server(pg_url, admin_key=key, lease=lease))
        yield first, second


@pytest.fixture
def pair(pg_url: str) -> Iterator[Pair]:
    yield from start_pair(pg_url)


@pytest.fixture
def short_lease_pair(pg_url: str) -> Iterator[Pair]:
    yield from start_pair(pg_url, lease=1)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def run_token(value: str) -> dict[str, str]:
    return {"x-agentos-run-token": value}


def new_key(server: ServerInfo, role: str) -> dict[str, str]:
    answer = httpx.post(f"{server.url}/v0/keys", timeout=HANG_S, json={"role": role}, headers=bearer(server.admin_key))
    assert answer.status_code == 201, answer.text
    return bearer(answer.json()["key"])


def claim(client: httpx.Client, worker: dict[str, str], agent: str, wait: float = 0) -> dict[str, Any] | None:
    answer = client.post("/v0/invocations/claim", json={"agents": [agent], "wait": wait}, headers=worker)
    assert answer.status_code in (200, 204), answer.text
    return answer.json() if answer.status_code == 200 else None


def in_threads(count: int, fn: Callable[[int], T]) -> list[T]:
    """``fn(0..count-1)`` in as many threads, released together by a barrier."""
    barrier = threading.Barrier(count)

    def call(index: int) -> T:
        barrier.wait()
        return fn(index)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(call, range(count)))


def clients(servers: Pair) -> tuple[httpx.Client, httpx.Client]:
    return httpx.Client(base_url=servers[0].url, timeout=HANG_S), httpx.Client(base_url=servers[1].url, timeout=HANG_S)


def test_one_turn_per_session_across_two_servers(pair: Pair) -> None:
    member = new_key(pair[0], "member")  # created on one server, used on both
    for _ in range(3):
        session_id = httpx.post(f"{pair[1].url}/v0/sessions", timeout=HANG_S, json={}, headers=member).json()["id"]

        def start(index: int, session_id: str = session_id) -> int:
            url = pair[index % 2].url
            answer = httpx.post(
                f"{url}/v0/runs", timeout=HANG_S, json={"agent": "chat", "session_id": session_id}, headers=member
            )
            assert answer.status_code == 202 or answer.json()["error"] == "session_busy", answer.text
            return answer.status_code

        statuses = Counter(in_threads(16, start))
        assert statuses == {202: 1, 409: 15}
        for server in pair:
            listed = httpx.get(
                f"{server.url}/v0/runs", timeout=HANG_S, params={"session_id": session_id}, headers=member
            ).json()
            assert len(listed["runs"]) == 1


def test_every_queued_run_is_claimed_exactly_once_across_two_servers(pair: Pair) -> None:
    member, worker = new_key(pair[0], "member"), new_key(pair[1], "worker")
    total = 60
    started = in_threads(
        12,
        lambda i: [
            httpx.post(f"{pair[i % 2].url}/v0/runs", timeout=HANG_S, json={"agent": "job"}, headers=member).json()["id"]
            for _ in range(5)
        ],
    )
    run_ids = {run_id for batch in started for run_id in batch}
    assert len(run_ids) == total

    def drain(index: int) -> list[str]:
        here, there = clients(pair) if index % 2 else reversed(clients(pair))
        got: list[str] = []
        with here, there:
            while (inv := claim(here, worker, "job", wait=0.3)) is not None:
                got.append(inv["run_id"])
                done = there.post(
                    f"/v0/invocations/{inv['id']}/complete", json={"output": index}, headers=run_token(inv["token"])
                )
                assert done.status_code == 200, done.text  # completed through the other server
        return got

    claimed = Counter(run_id for got in in_threads(8, drain) for run_id in got)
    assert set(claimed) == run_ids and set(claimed.values()) == {1}
    for server in pair:
        runs = httpx.get(
            f"{server.url}/v0/runs", timeout=HANG_S, params={"status": "done", "limit": 1000}, headers=member
        ).json()
        assert {r["id"] for r in runs["runs"]} == run_ids


def test_enqueued_turns_started_and_claimed_through_two_servers_run_one_at_a_time_in_order(pair: Pair) -> None:
    """Threads start turns of one session with ``multitask: enqueue`` through either server while others
    claim through either and log each turn's start and end in the session's state: the log alternates,
    one turn at a time, in the order the turns were started."""
    member, worker = new_key(pair[0], "member"), new_key(pair[1], "worker")
    session_id = httpx.post(f"{pair[0].url}/v0/sessions", timeout=HANG_S, json={}, headers=member).json()["id"]
    starters, per_starter, drainers = 6, 4, 6
    total, finished, counting = starters * per_starter, Counter[str](), threading.Lock()
    body = {"agent": "enqueued", "session_id": session_id, "multitask": "enqueue"}

    def start(index: int) -> None:
        for n in range(per_starter):
            answer = httpx.post(f"{pair[(index + n) % 2].url}/v0/runs", timeout=HANG_S, json=body, headers=member)
            assert answer.status_code == 202, answer.text

    def drain(index: int) -> None:
        here, there = clients(pair) if index % 2 else reversed(clients(pair))
        deadline = time.monotonic() + HANG_S
        with here, there:
            while len(finished) < total:
                assert time.monotonic() < deadline, "enqueued turns were left unclaimed"
                if (inv := claim(here, worker, "enqueued", wait=0.2)) is None:
                    continue
                for step, client in (("start", here), ("end", there)):
                    logged = client.post(
                        "/v0/state/session/log/append",
                        json={"items": [[step, inv["run_id"]]]},
                        headers=run_token(inv["token"]),
                    )
                    assert logged.status_code == 200, logged.text
                ended = there.post(f"/v0/invocations/{inv['id']}/complete", json={}, headers=run_token(inv["token"]))
                assert ended.status_code == 200, ended.text
                with counting:
                    finished[inv["run_id"]] += 1

    in_threads(starters + drainers, lambda i: start(i) if i < starters else drain(i))
    listed = httpx.get(
        f"{pair[1].url}/v0/runs", timeout=HANG_S, params={"session_id": session_id, "limit": 100}, headers=member
    ).json()["runs"]
    assert [r["status"] for r in listed] == ["done"] * total and set(finished.values()) == {1}
    log = httpx.get(
        f"{pair[0].url}/v0/sessions/{session_id}/state/enqueued/log", timeout=HANG_S, headers=member
    ).json()["value"]
    assert [step for step, _ in log] == ["start", "end"] * total, "two turns of the session ran at once"
    assert [run_id for _, run_id in log[::2]] == [r["id"] for r in listed]  # in start (seq) order


def test_compare_and_set_and_appends_are_exact_across_two_servers(pair: Pair) -> None:
    admin = bearer(pair[0].admin_key)
    httpx.post(f"{pair[0].url}/v0/runs", timeout=HANG_S, json={"agent": "counter"}, headers=admin)
    with httpx.Client(base_url=pair[1].url, timeout=HANG_S) as client:
        inv = claim(client, admin, "counter", wait=2)
    assert inv is not None
    headers = run_token(inv["token"])
    workers, rounds = 6, 15

    def add(index: int) -> int:
        conflicts = 0
        with ExitStack() as stack:
            a, b = (stack.enter_context(c) for c in clients(pair))
            for n in range(rounds):
                while True:  # read on one server, write on the other
                    read, write = (a, b) if (index + n) % 2 else (b, a)
                    got = read.get("/v0/state/agent/count", headers=headers)
                    value, version = (got.json()["value"], got.json()["version"]) if got.status_code == 200 else (0, 0)
                    put = write.put(
                        "/v0/state/agent/count", json={"value": value + 1, "if_version": version}, headers=headers
                    )
                    if put.status_code == 200:
                        break
                    assert put.json()["error"] == "version_conflict", put.text
                    conflicts += 1
                append = (a, b)[n % 2].post(
                    "/v0/state/agent/log/append", json={"items": [f"{index}:{n}"]}, headers=headers
                )
                assert append.status_code == 200, append.text
        return conflicts

    in_threads(workers, add)
    for server in pair:
        count = httpx.get(f"{server.url}/v0/state/agent/count", timeout=HANG_S, headers=headers).json()
        assert count == {"value": workers * rounds, "version": workers * rounds}
        log = httpx.get(f"{server.url}/v0/state/agent/log", timeout=HANG_S, headers=headers).json()
        assert sorted(log["value"]) == sorted(f"{i}:{n}" for i in range(workers) for n in range(rounds))
        assert log["version"] == workers * rounds
    for server in pair:  # a write from a stale read is refused on either server, however the race went
        stale = httpx.put(
            f"{server.url}/v0/state/agent/count",
            timeout=HANG_S,
            json={"value": 0, "if_version": workers * rounds - 1},
            headers=headers,
        )
        assert stale.status_code != 200 and stale.json()["error"] == "version_conflict", stale.text
    count = httpx.get(f"{pair[0].url}/v0/state/agent/count", timeout=HANG_S, headers=headers).json()
    assert count == {"value": workers * rounds, "version": workers * rounds}


def test_a_run_token_from_one_server_works_on_the_other(pair: Pair) -> None:
    one, other = pair
    member, worker = new_key(one, "member"), new_key(other, "worker")
    run = httpx.post(f"{one.url}/v0/runs", timeout=HANG_S, json={"agent": "tok"}, headers=member).json()
    with httpx.Client(base_url=one.url, timeout=HANG_S) as client:
        inv = claim(client, worker, "tok", wait=2)
    assert inv is not None
    headers = run_token(inv["token"])
    put = httpx.put(f"{other.url}/v0/state/run/step", timeout=HANG_S, json={"value": 1}, headers=headers)
    assert put.json() == {"version": 1}
    assert httpx.get(f"{one.url}/v0/state/run/step", timeout=HANG_S, headers=headers).json() == {
        "value": 1,
        "version": 1,
    }
    beat = httpx.post(f"{other.url}/v0/invocations/{inv['id']}/heartbeat", timeout=HANG_S, headers=headers)
    assert beat.status_code == 200 and beat.json()["cancel_requested"] is False
    assert httpx.post(f"{one.url}/v0/runs/{run['id']}/cancel", timeout=HANG_S, headers=member).status_code == 200
    beat = httpx.post(f"{other.url}/v0/invocations/{inv['id']}/heartbeat", timeout=HANG_S, headers=headers)
    assert beat.json()["cancel_requested"] is True  # a cancel asked on one server, seen through the other
    done = httpx.post(
        f"{other.url}/v0/invocations/{inv['id']}/complete", timeout=HANG_S, json={"output": "ok"}, headers=headers
    )
    assert done.status_code == 200
    for server in pair:
        assert httpx.get(f"{server.url}/v0/runs/{run['id']}", timeout=HANG_S, headers=member).json()["status"] == "done"
        dead = httpx.get(f"{server.url}/v0/state/run/step", timeout=HANG_S, headers=headers)
        assert (dead.status_code, dead.json()["error"]) == (401, "unauthorized")


def test_a_lost_lease_is_handled_once_and_seen_alike_on_both_servers(short_lease_pair: Pair, pg_url: str) -> None:
    import psycopg

    one, other = short_lease_pair
    member, worker = new_key(one, "member"), new_key(other, "worker")

    def get_run(server: ServerInfo, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = httpx.get(f"{server.url}/v0/runs/{run_id}", timeout=HANG_S, headers=member).json()
        return found

    runs = [
        httpx.post(f"{one.url}/v0/runs", timeout=HANG_S, json={"agent": "lost"}, headers=member).json()["id"]
        for _ in range(6)
    ]
    invs = []
    with ExitStack() as stack:
        a, b = (stack.enter_context(c) for c in clients(short_lease_pair))
        for index in range(6):
            inv = claim((a, b)[index % 2], worker, "lost", wait=2)
            assert inv is not None
            invs.append(inv)
    give_up = time.monotonic() + HANG_S
    for run_id in runs:  # once past the lease a server's sweep (every 0.25 s at a 1 s lease) interrupts it
        while (seen := [get_run(server, run_id) for server in short_lease_pair])[0]["status"] != "interrupted":
            assert time.monotonic() < give_up, f"run {run_id} never interrupted: {seen[0]['status']}"
            time.sleep(0.2)
        assert seen[0] == seen[1] and seen[0]["status"] == "interrupted"
    for inv in invs:
        for server in short_lease_pair:
            headers = run_token(inv["token"])
            assert httpx.get(f"{server.url}/v0/state/run/k", timeout=HANG_S, headers=headers).status_code == 401
            assert (
                httpx.post(
                    f"{server.url}/v0/invocations/{inv['id']}/heartbeat", timeout=HANG_S, headers=headers
                ).status_code
                == 401
            )
    with psycopg.connect(pg_url) as conn:  # once: one invocation per run, lost, and nothing queued again
        rows = conn.execute("SELECT run_id, status FROM ks_invocations").fetchall()
    assert sorted(rows) == sorted((run_id, "lost") for run_id in runs)
    with httpx.Client(base_url=one.url, timeout=HANG_S) as client:
        assert claim(client, worker, "lost") is None
