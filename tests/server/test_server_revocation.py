"""Revoking a key holds at every moment a request acts, on real ``keepstate serve`` processes.

A revocation must stop a request that already passed its key check and is waiting (a claim's long poll,
a run's ``?wait=``), and must end what the key holds: the invocations it claimed (their run tokens are
refused, their runs interrupted), seen at once by every server sharing the store. Each race is made by
construction: the waiting request is seen in the server's own store-call counts (``/metrics``) to have
passed authentication and begun to poll; only then is the key revoked (through the *other* server when
the store is shared), and only then is the run queued or finished.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from server_helpers import bearer, token

from backends import declaring
from keepstate.stores import capabilities_of
from serverproc import running_server

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)

ROOT = "ks_root_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
ADMIN = bearer(ROOT)
SEEN_WITHIN_S = 60.0


@pytest.fixture
def pair(backend_url: str) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Clients of two servers on one store (the same server twice for a store of one process)."""
    with ExitStack() as stack:
        one = stack.enter_context(running_server(backend_url, admin_key=ROOT))
        two = stack.enter_context(running_server(backend_url, admin_key=ROOT)) if _shared(backend_url) else one
        yield (
            stack.enter_context(httpx.Client(base_url=one.url, timeout=60)),
            stack.enter_context(httpx.Client(base_url=two.url, timeout=60)),
        )


def _shared(url: str) -> bool:
    return capabilities_of(url).shared


def _key(http: httpx.Client, role: str) -> tuple[str, dict[str, str]]:
    made = http.post("/v0/keys", json={"role": role}, headers=ADMIN)
    assert made.status_code == 201, made.text
    return made.json()["id"], bearer(made.json()["key"])


def _keys(http: httpx.Client, revoked: str, other: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """A key of role ``revoked`` (its id and headers), to be revoked, and a key of role ``other`` (headers)."""
    key_id, first = _key(http, revoked)
    return key_id, first, _key(http, other)[1]


def _store_calls(http: httpx.Client, operation: str) -> int:
    text = http.get("/metrics").text
    found = re.search(rf'keepstate_store_seconds_count{{operation="platform\.{operation}"}} (\d+)', text)
    return int(found.group(1)) if found else 0


def _until(condition: Callable[[], bool], what: str) -> None:
    """Poll an observable condition of the servers (never a fixed sleep standing in for an event)."""
    deadline = time.monotonic() + SEEN_WITHIN_S
    while not condition():
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.02)


class Waiting:
    """A request sent on a thread of its own; ``answer()`` joins it."""

    def __init__(self, send: Callable[[], httpx.Response]) -> None:
        self._answer: list[httpx.Response] = []
        self._thread = threading.Thread(target=lambda: self._answer.append(send()), daemon=True)
        self._thread.start()

    def answer(self) -> httpx.Response:
        self._thread.join(SEEN_WITHIN_S)
        assert self._answer, "the waiting request never answered"
        return self._answer[0]


def waiting(http: httpx.Client, operation: str, send: Callable[[], httpx.Response]) -> Waiting:
    """``send`` on a thread of its own, returned once the server is seen making the store call
    ``operation`` for it: the request has passed its key check and is waiting."""
    before = _store_calls(http, operation)
    started = Waiting(send)
    _until(lambda: _store_calls(http, operation) > before, f"the waiting request's {operation}")
    return started


def _revoke(http: httpx.Client, key_id: str) -> None:
    assert http.delete(f"/v0/keys/{key_id}", headers=ADMIN).status_code == 204


def _run(http: httpx.Client, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = http.get(f"/v0/runs/{run_id}", headers=ADMIN).json()
    return found


def test_a_claim_waiting_when_its_key_is_revoked_takes_nothing_queued_after(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    one, two = pair
    worker_id, worker, member = _keys(one, "worker", "member")
    claim = waiting(
        one,
        "has_queued",
        lambda: one.post("/v0/invocations/claim", json={"agents": ["late"], "wait": 30}, headers=worker),
    )
    _revoke(two, worker_id)
    started = two.post("/v0/runs", json={"agent": "late", "input": {"secret": 1}}, headers=member)
    assert started.status_code == 202, started.text
    answered = claim.answer()
    assert answered.status_code == 401, answered.text
    assert "secret" not in answered.text and answered.json()["error"] == "unauthorized"
    assert _run(two, started.json()["id"])["status"] == "queued"  # nothing lost: a live worker takes it
    _, other = _key(two, "worker")
    taken = two.post("/v0/invocations/claim", json={"agents": ["late"]}, headers=other)
    assert taken.status_code == 200 and taken.json()["input"] == {"secret": 1}


def test_a_run_wait_by_a_key_revoked_meanwhile_does_not_answer_the_output(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    one, two = pair
    member_id, member, worker = _keys(one, "member", "worker")
    run = one.post("/v0/runs", json={"agent": "slow"}, headers=member).json()
    inv = two.post("/v0/invocations/claim", json={"agents": ["slow"]}, headers=worker).json()
    wait = waiting(one, "get_run", lambda: one.get(f"/v0/runs/{run['id']}", params={"wait": 30}, headers=member))
    _revoke(two, member_id)
    done = two.post(f"/v0/invocations/{inv['id']}/complete", json={"output": "after"}, headers=token(inv["token"]))
    assert done.status_code == 200, done.text
    answered = wait.answer()
    assert answered.status_code == 401, answered.text
    assert "after" not in answered.text


def test_revoking_a_worker_key_ends_its_tokens_on_every_server_and_interrupts_their_runs(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    one, two = pair
    worker_id, worker, member = _keys(one, "worker", "member")
    session = one.post("/v0/sessions", json={"user": "ada"}, headers=member).json()["id"]
    run = one.post("/v0/runs", json={"agent": "held", "session_id": session}, headers=member).json()
    inv = one.post("/v0/invocations/claim", json={"agents": ["held"]}, headers=worker).json()
    headers = token(inv["token"])
    for http in (one, two):  # the token works, and each server now keeps what it stands for
        assert http.put("/v0/state/run/k", json={"value": 1}, headers=headers).status_code == 200
        assert http.get("/v0/state/run/k", headers=headers).status_code == 200
    _revoke(two, worker_id)
    for http in (one, two):
        assert http.post(f"/v0/invocations/{inv['id']}/heartbeat", headers=headers).status_code == 401
        assert http.get("/v0/state/run/k", headers=headers).status_code == 401
        assert http.put("/v0/state/session/k", json={"value": 2}, headers=headers).status_code == 401
        assert http.put("/v0/memory/notes", json={"text": "x"}, headers=headers).status_code == 401
        assert http.post("/v0/runs", json={"agent": "child"}, headers=headers).status_code == 401
        done = http.post(f"/v0/invocations/{inv['id']}/complete", json={"output": 1}, headers=headers)
        assert done.status_code == 401
    assert _run(one, run["id"])["status"] == "interrupted"
    listed = one.get("/v0/runs", params={"status": "queued"}, headers=ADMIN).json()["runs"]
    assert [r for r in listed if r["agent"] == "child"] == []


def test_revoking_a_member_key_leaves_the_tokens_a_worker_holds_for_its_runs(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    one, two = pair
    member_id, member, worker = _keys(one, "member", "worker")
    one.post("/v0/runs", json={"agent": "kept"}, headers=member)
    inv = one.post("/v0/invocations/claim", json={"agents": ["kept"]}, headers=worker).json()
    _revoke(two, member_id)
    assert one.get("/v0/sessions", headers=member).status_code == 401
    done = one.post(f"/v0/invocations/{inv['id']}/complete", json={"output": 1}, headers=token(inv["token"]))
    assert done.status_code == 200, done.text
