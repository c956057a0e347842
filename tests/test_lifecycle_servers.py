"""Queue deadlines across two ``keepstate serve`` processes sharing one store: one PostgreSQL schema,
and one SQLite file.

Each test starts two real servers on the same fresh store with the same admin key, as behind a load
balancer, and drives them from threads that alternate between them: a run whose ``queue_timeout``
passed frees its session for exactly one new turn, is never handed to a worker after its deadline,
and expires even when the server it was started on is gone.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from keepstate.clock import now_ms
from lifecycle_support import SHARED, Pair, new_key, serve_pair
from serverproc import ServerInfo, stop

pytestmark = SHARED
HANG_S = 60
"""Bounds a wait for something that must happen, so a broken server fails instead of hanging."""


@pytest.fixture
def pair(backend_url: str) -> Iterator[Pair]:
    with serve_pair(backend_url, lease=3600) as servers:  # a claimed run is completed however slow the machine
        yield servers


def start(server: ServerInfo, member: dict[str, str], **body: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v0/runs", json=body, headers=member, timeout=HANG_S)


def run_of(server: ServerInfo, member: dict[str, str], run_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/v0/runs/{run_id}", headers=member, timeout=HANG_S)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def sleep_until(deadline_ms: int, extra: float = 0.0) -> None:
    time.sleep(max(0.0, (deadline_ms - now_ms()) / 1000) + extra)


def test_an_expired_run_frees_its_session_for_exactly_one_turn(pair: Pair) -> None:
    member = new_key(pair[0], "member")
    session_id = httpx.post(f"{pair[0].url}/v0/sessions", json={}, headers=member, timeout=HANG_S).json()["id"]
    stuck = start(pair[0], member, agent="nobody", session_id=session_id, queue_timeout=1)
    assert stuck.status_code == 202 and stuck.json()["queue_deadline"] is not None
    # a queued run holds its session on either server: shown where its deadline is an hour off, as the
    # 1 s one above may pass before a loaded machine asks
    held_id = httpx.post(f"{pair[0].url}/v0/sessions", json={}, headers=member, timeout=HANG_S).json()["id"]
    holder = start(pair[0], member, agent="nobody", session_id=held_id, queue_timeout=3600)
    assert holder.status_code == 202
    busy = start(pair[1], member, agent="chat", session_id=held_id)
    assert busy.status_code == 409 and busy.json()["error"] == "session_busy"
    sleep_until(stuck.json()["queue_deadline"], 0.05)
    barrier = threading.Barrier(16)

    def turn(index: int) -> int:
        barrier.wait()
        return start(pair[index % 2], member, agent="chat", session_id=session_id).status_code

    with ThreadPoolExecutor(16) as pool:
        statuses = Counter(pool.map(turn, range(16)))
    assert statuses == {202: 1, 409: 15}
    for server in pair:
        assert run_of(server, member, stuck.json()["id"])["status"] == "expired"
        listed = httpx.get(
            f"{server.url}/v0/runs", params={"session_id": session_id}, headers=member, timeout=HANG_S
        ).json()
        assert Counter(run["status"] for run in listed["runs"]) == {"expired": 1, "queued": 1}


def test_no_worker_gets_a_run_after_its_deadline(pair: Pair) -> None:
    """Workers race 48 runs of 1 s deadlines. Whatever the timing, two runs make the race real: one whose
    deadline passed before any worker asked (it must expire, never be handed out), and one whose deadline
    is an hour off (it must be claimed: the workers go on until it is)."""
    member, worker = new_key(pair[0], "member"), new_key(pair[1], "worker")
    starts: list[dict[str, Any]] = []
    lock = threading.Lock()
    overdue = start(pair[0], member, agent="late", queue_timeout=1).json()
    starts.append(overdue)
    sleep_until(overdue["queue_deadline"], 0.05)
    lasting = start(pair[1], member, agent="late", queue_timeout=3600).json()

    def queue_some(index: int) -> None:
        for _ in range(8):
            answer = start(pair[index % 2], member, agent="late", queue_timeout=1)
            assert answer.status_code == 202, answer.text
            with lock:
                starts.append(answer.json())

    claims: list[tuple[int, str]] = []
    stop_at, give_up = time.monotonic() + 4.0, time.monotonic() + HANG_S  # the race's window; a hang guard
    lasting_claimed = threading.Event()

    def work(index: int) -> None:
        with httpx.Client(base_url=pair[index % 2].url, timeout=HANG_S) as client:
            while (time.monotonic() < stop_at or not lasting_claimed.is_set()) and time.monotonic() < give_up:
                sent = now_ms()
                answer = client.post("/v0/invocations/claim", json={"agents": ["late"], "wait": 0.2}, headers=worker)
                assert answer.status_code in (200, 204), answer.text
                if answer.status_code == 200:
                    inv = answer.json()
                    with lock:
                        claims.append((sent, inv["run_id"]))
                    if inv["run_id"] == lasting["id"]:
                        lasting_claimed.set()
                    done = client.post(
                        f"/v0/invocations/{inv['id']}/complete",
                        json={"output": 1},
                        headers={"x-agentos-run-token": inv["token"]},
                    )
                    assert done.status_code == 200, done.text
                    time.sleep(0.1)  # slower than the runs come: most race their deadlines

    threads = [threading.Thread(target=queue_some, args=(i,)) for i in range(6)]
    threads += [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert lasting_claimed.is_set(), "the run an hour from its deadline was never claimed"
    deadlines = {run["id"]: run["queue_deadline"] for run in starts}
    sleep_until(max(deadlines.values()), 0.05)  # a run queued late in a slow race may still be in its time
    deadlines[lasting["id"]] = lasting["queue_deadline"]
    claims_of = Counter(run_id for _, run_id in claims)
    assert set(claims_of.values()) == {1}  # each claimed once
    claimed = set(claims_of)
    for sent, run_id in claims:
        assert sent <= deadlines[run_id], "a run was handed to a worker after its deadline"
    statuses = {run_id: run_of(pair[1], member, run_id)["status"] for run_id in deadlines}
    assert {statuses[run_id] for run_id in claimed} <= {"done"}
    assert {status for run_id, status in statuses.items() if run_id not in claimed} <= {"expired"}
    assert overdue["id"] not in claimed and statuses[overdue["id"]] == "expired"
    assert lasting["id"] in claimed and statuses[lasting["id"]] == "done"


def test_a_run_expires_when_the_server_it_was_started_on_is_gone(pair: Pair) -> None:
    member = new_key(pair[0], "member")
    session_id = httpx.post(f"{pair[0].url}/v0/sessions", json={}, headers=member, timeout=HANG_S).json()["id"]
    run = start(pair[0], member, agent="nobody", session_id=session_id, queue_timeout=1).json()
    stop(pair[0].process)
    sleep_until(run["queue_deadline"])
    give_up = time.monotonic() + HANG_S
    expired: list[dict[str, Any]] = []
    while not expired and time.monotonic() < give_up:  # a listing expires nothing itself: only the sweep does
        time.sleep(0.2)
        expired = httpx.get(
            f"{pair[1].url}/v0/runs", params={"status": "expired"}, headers=member, timeout=HANG_S
        ).json()["runs"]
    assert [found["id"] for found in expired] == [run["id"]]
    assert start(pair[1], member, agent="chat", session_id=session_id).status_code == 202
