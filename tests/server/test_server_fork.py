"""``POST /v0/sessions/{id}/fork`` on a real ``keepstate serve`` per backend that declares a platform.

A fork is a new session of the caller, ``parent`` the source's id, holding a copy of the source's
session-scope state (every agent's) as of one instant, with the lists named in ``lists`` cut to their
first items. The race test forks while a running run's worker writes the source in atomic batches (an
append of the next number and an ``incr`` of a counter): every fork must hold a prefix of the numbers
with the counter, and both versions, agreeing with it — a copy mixing two instants breaks one of them.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import httpx
import pytest
from server_helpers import bearer, error_of, token

from backends import declaring, fresh_url
from serverproc import running_server

ROOT = "ks_root_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
ADMIN = bearer(ROOT)
FORKS = 5
BATCHES_BETWEEN_FORKS = 40


@pytest.fixture(scope="module", params=declaring("platform"))
def http(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """One server per backend for the module: each test makes its own keys, sessions, ids and agents."""
    with (
        fresh_url(request.param, tmp_path_factory.mktemp("fork")) as url,
        running_server(url, admin_key=ROOT) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        yield client


def fresh(name: str) -> str:
    """``name`` made unique on the module's shared server."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def key(http: httpx.Client, role: str) -> tuple[str, dict[str, str]]:
    made = http.post("/v0/keys", json={"role": role}, headers=ADMIN)
    assert made.status_code == 201, made.text
    return made.json()["id"], bearer(made.json()["key"])


def session(http: httpx.Client, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    made = http.post("/v0/sessions", json=body, headers=headers)
    assert made.status_code == 201, made.text
    found: dict[str, Any] = made.json()
    return found


def fork(http: httpx.Client, headers: dict[str, str], session_id: str, **body: Any) -> dict[str, Any]:
    made = http.post(f"/v0/sessions/{session_id}/fork", json=body, headers=headers)
    assert made.status_code == 201, made.text
    found: dict[str, Any] = made.json()
    return found


def state(session_id: str, agent: str, key: str) -> str:
    return f"/v0/sessions/{session_id}/state/{agent}/{key}"


def read(http: httpx.Client, headers: dict[str, str], path: str) -> tuple[Any, int] | None:
    got = http.get(path, headers=headers)
    if got.status_code == 404:
        return None
    assert got.status_code == 200, got.text
    return got.json()["value"], got.json()["version"]


def write(http: httpx.Client, headers: dict[str, str], path: str, value: Any) -> None:
    assert http.put(path, json={"value": value}, headers=headers).status_code == 200


def append(http: httpx.Client, headers: dict[str, str], path: str, *items: Any) -> None:
    answer = http.post(f"{path}/append", json={"items": list(items)}, headers=headers)
    assert answer.status_code == 200, answer.text


def test_a_fork_copies_every_agents_state_cuts_the_named_lists_and_shows_its_parent(http: httpx.Client) -> None:
    member_id, member = key(http, "member")
    source = session(http, member, user="ada", metadata={"topic": "x"})
    sid = source["id"]
    assert source["parent"] is None
    append(http, member, state(sid, "chat", "messages"), *[f"m{n}" for n in range(10)])
    write(http, member, state(sid, "chat", "title"), "hello")
    append(http, member, state(sid, "critic", "notes"), "a", "b")
    made = fork(http, member, sid, lists={"chat/messages": 4, "critic/notes": 0}, metadata={"edit": 5})
    fid = made["id"]
    assert fid != sid and (made["parent"], made["owner"], made["user"], made["metadata"]) == (
        sid,
        member_id,
        "ada",
        {"edit": 5},
    )
    assert http.get(f"/v0/sessions/{fid}", headers=member).json() == made
    listed = http.get("/v0/sessions", headers=member).json()["sessions"]
    assert [(s["id"], s["parent"]) for s in listed] == [(sid, None), (fid, sid)]
    assert read(http, member, state(fid, "chat", "messages")) == (["m0", "m1", "m2", "m3"], 2)
    assert read(http, member, state(fid, "chat", "title")) == ("hello", 1)
    assert read(http, member, state(fid, "critic", "notes")) == ([], 2)
    assert read(http, member, state(sid, "chat", "messages")) == ([f"m{n}" for n in range(10)], 1)
    append(http, member, state(fid, "chat", "messages"), "regenerated")
    append(http, member, state(sid, "chat", "messages"), "m10")
    write(http, member, state(sid, "chat", "title"), "renamed")
    assert read(http, member, state(fid, "chat", "messages")) == (["m0", "m1", "m2", "m3", "regenerated"], 3)
    assert read(http, member, state(fid, "chat", "title")) == ("hello", 1)
    assert read(http, member, state(sid, "chat", "messages")) == ([f"m{n}" for n in range(11)], 2)
    assert http.delete(f"/v0/sessions/{fid}", headers=member).status_code == 204
    assert read(http, member, state(sid, "critic", "notes")) == (["a", "b"], 1)


def test_a_named_key_that_is_not_a_list_is_409_and_no_session_is_made(http: httpx.Client) -> None:
    _, member = key(http, "member")
    sid = session(http, member)["id"]
    write(http, member, state(sid, "chat", "title"), "hello")
    append(http, member, state(sid, "chat", "messages"), 1, 2)
    fid = fresh("f1")
    answer = http.post(
        f"/v0/sessions/{sid}/fork", json={"id": fid, "lists": {"chat/messages": 1, "chat/title": 0}}, headers=member
    )
    error_of(answer, 409, "not_a_list")
    error_of(http.get(f"/v0/sessions/{fid}", headers=member), 404, "not_found")
    assert [s["id"] for s in http.get("/v0/sessions", headers=member).json()["sessions"]] == [sid]
    assert http.get(f"/v0/sessions/{fid}/state/chat/", headers=ADMIN).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"lists": []},
        {"lists": {"messages": 1}},
        {"lists": {"chat/messages": -1}},
        {"lists": {"chat/messages": True}},
        {"lists": {"chat/messages": 1.5}},
        {"lists": {"chat/messages": "1"}},
        {"lists": {"chat/a/b": 1}},
        {"lists": {"/messages": 1}},
        {"lists": {"chat/messages": 2**31}},
        {"lists": {f"chat/k{n}": 1 for n in range(101)}},
        {"id": "not an id"},
        {"user": ""},
        {"metadata": 3},
    ],
)
def test_a_malformed_fork_is_400_and_makes_nothing(http: httpx.Client, body: dict[str, Any]) -> None:
    _, member = key(http, "member")
    sid = session(http, member)["id"]
    error_of(http.post(f"/v0/sessions/{sid}/fork", json=body, headers=member), 400, "invalid_request")
    assert [s["id"] for s in http.get("/v0/sessions", headers=member).json()["sessions"]] == [sid]


def test_only_the_owner_and_admins_fork_and_a_taken_id_is_refused(http: httpx.Client) -> None:
    member_id, member = key(http, "member")
    _, other = key(http, "member")
    sid = session(http, member, user="bea")["id"]
    write(http, member, state(sid, "chat", "title"), "hello")
    error_of(http.post(f"/v0/sessions/{sid}/fork", headers=other), 404, "not_found")
    error_of(http.post("/v0/sessions/nope/fork", headers=member), 404, "not_found")
    _, worker = key(http, "worker")
    error_of(http.post(f"/v0/sessions/{sid}/fork", headers=worker), 403, "forbidden")
    admin_fork, mine_id = fresh("admin-fork"), fresh("mine")
    by_admin = fork(http, ADMIN, sid, id=admin_fork)
    assert (by_admin["parent"], by_admin["user"]) == (sid, "bea") and by_admin["owner"] != member_id
    assert read(http, ADMIN, state(admin_fork, "chat", "title")) == ("hello", 1)
    error_of(http.get(f"/v0/sessions/{admin_fork}", headers=member), 404, "not_found")
    again = http.post(f"/v0/sessions/{sid}/fork", json={"id": admin_fork}, headers=ADMIN)
    assert again.status_code == 200 and again.json() == by_admin
    mine = session(http, member, id=mine_id)
    error_of(http.post(f"/v0/sessions/{sid}/fork", json={"id": mine_id}, headers=member), 403, "forbidden")
    error_of(http.post(f"/v0/sessions/{sid}/fork", json={"id": admin_fork}, headers=member), 403, "forbidden")
    assert http.get(f"/v0/sessions/{mine_id}", headers=member).json() == mine


def test_a_session_with_a_running_run_forks_and_the_fork_has_no_runs(http: httpx.Client) -> None:
    _, member = key(http, "member")
    _, worker = key(http, "worker")
    agent = fresh("chat")
    sid = session(http, member)["id"]
    run = http.post("/v0/runs", json={"agent": agent, "session_id": sid}, headers=member).json()
    queued_fork = fork(http, member, sid)
    inv = http.post("/v0/invocations/claim", json={"agents": [agent], "wait": 5}, headers=worker).json()
    assert inv["run_id"] == run["id"]
    assert http.put("/v0/state/session/seen", json={"value": 1}, headers=token(inv["token"])).status_code == 200
    running_fork = fork(http, member, sid)
    for made in (queued_fork, running_fork):
        assert http.get("/v0/runs", params={"session_id": made["id"]}, headers=member).json()["runs"] == []
        turn = http.post("/v0/runs", json={"agent": agent, "session_id": made["id"]}, headers=member)
        assert turn.status_code == 202, turn.text
    assert read(http, member, state(running_fork["id"], agent, "seen")) == (1, 1)
    assert read(http, member, state(queued_fork["id"], agent, "seen")) is None
    assert http.get(f"/v0/runs/{run['id']}", headers=member).json()["status"] == "running"


def test_every_fork_under_a_concurrent_writer_is_the_source_at_one_instant(http: httpx.Client) -> None:
    _, member = key(http, "member")
    _, worker = key(http, "worker")
    agent = fresh("chat")
    sid = session(http, member)["id"]
    run = http.post("/v0/runs", json={"agent": agent, "session_id": sid}, headers=member).json()
    inv = http.post("/v0/invocations/claim", json={"agents": [agent], "wait": 5}, headers=worker).json()
    assert inv["run_id"] == run["id"]
    written, stop, progress = [0], threading.Event(), threading.Condition()

    def writer() -> None:
        ops = [{"op": "append", "scope": "session", "key": "numbers"}, {"op": "incr", "scope": "session", "key": "n"}]
        with httpx.Client(base_url=str(http.base_url), timeout=60) as own:
            while not stop.is_set():
                body = {"ops": [{**ops[0], "items": [written[0]]}, ops[1]]}
                answer = own.post("/v0/state/batch", json=body, headers=token(inv["token"]))
                assert answer.status_code == 200, answer.text
                with progress:
                    written[0] += 1
                    progress.notify_all()

    def reached(target: int) -> bool:
        return written[0] >= target or not thread.is_alive()

    thread = threading.Thread(target=writer)
    thread.start()
    forks = []
    try:
        for n in range(1, FORKS + 1):
            with progress:
                progress.wait_for(partial(reached, n * BATCHES_BETWEEN_FORKS), 120)
            assert thread.is_alive() and written[0] >= n * BATCHES_BETWEEN_FORKS
            forks.append(fork(http, member, sid)["id"])
    finally:
        stop.set()
        thread.join()
    final, _ = read(http, member, state(sid, agent, "numbers")) or ([], 0)
    assert final == list(range(written[0]))
    lengths = []
    for n, fid in enumerate(forks, 1):
        numbers = read(http, member, state(fid, agent, "numbers"))
        counter = read(http, member, state(fid, agent, "n"))
        assert numbers is not None and counter is not None
        items, version = numbers
        assert items == final[: len(items)] and len(items) >= n * BATCHES_BETWEEN_FORKS
        assert counter == (len(items), len(items)) and version == len(items)
        lengths.append(len(items))
    assert lengths == sorted(lengths)
