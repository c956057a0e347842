"""The SDK end to end against a real ``keepstate serve``: caller calls, worker protocol, state over HTTP."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sdk_helpers import Keys, make_key

import keepstate
from keepstate.client import AsyncClient, AsyncInvocation, AsyncWorker, Client, Invocation, Worker
from keepstate.client._worker_core import heartbeat_answered
from keepstate.client.records import Claim, Heartbeat
from serverproc import ServerInfo, running_server

HANG_S = 60
"""Bounds a wait for something that must happen, so a broken promise fails instead of hanging."""
LONG_LEASE_S = 3600
"""The server's invocation lease: no stall of a loaded machine outlives it, so no run here is lost
between heartbeats (a 3 s one was, when a beat came more than 3 s after the last)."""
BEAT_S = 0.1
"""How often the heartbeat tests' workers beat, whatever the lease: a cancel or an extension is seen soon."""


@pytest.fixture(scope="module")
def sdk_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sdk-e2e") / "server.db"


@pytest.fixture(scope="module")
def sdk_server(sdk_store: Path) -> Iterator[ServerInfo]:
    """This module's server (in place of conftest's, whose lease is 3 s): SQLite, an hour's lease."""
    with running_server(f"sqlite:///{sdk_store}", lease=LONG_LEASE_S) as info:
        yield info


def new_worker(server: ServerInfo, keys: Keys, **options: Any) -> Worker:
    return Worker(server.url, key=keys.worker, claim_wait=1, **options)


def beat_often(worker: Worker, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Make ``worker`` beat every BEAT_S (its claims and the beats' answers say so); the times answered."""
    answered: list[float] = []
    execute = worker._execute

    def beat(inv: Any, answer: Heartbeat) -> float:
        heartbeat_answered(inv, answer)  # mirrors cancel_requested
        answered.append(time.monotonic())
        return BEAT_S

    def executed(claim: Claim) -> None:
        execute(replace(claim, lease_seconds=3 * BEAT_S))  # the first beat's wait is a third of it

    worker._execute = executed  # type: ignore[method-assign]
    monkeypatch.setattr("keepstate.client.worker.heartbeat_answered", beat)
    return answered


def lease_until(store: Path, invocation_id: str) -> int:
    """The invocation's lease end as the server stored it."""
    with sqlite3.connect(store, timeout=HANG_S) as conn:
        (until,) = conn.execute("SELECT lease_until FROM ks_invocations WHERE id = ?", (invocation_id,)).fetchone()
    return int(until)


def test_sessions_crud_and_ownership(sdk_server: ServerInfo, keys: Keys) -> None:
    with Client(sdk_server.url, key=keys.member) as client:
        made = client.sessions.create(id="conv-1", user="cust-1", metadata={"channel": "web"})
        assert (made.id, made.user, made.metadata) == ("conv-1", "cust-1", {"channel": "web"})
        assert client.sessions.create(id="conv-1") == made  # the same id again: the existing session
        assert client.sessions.get("conv-1") == made
        others = [client.sessions.create(user="cust-1") for _ in range(3)]
        listed = [s.id for s in client.sessions.list(user="cust-1")]
        assert listed == ["conv-1", *[s.id for s in others]]
        assert len(list(client.sessions.list(limit=2))) == 2
        client.sessions.delete("conv-1")
        with pytest.raises(keepstate.NotFound):
            client.sessions.get("conv-1")
    with Client(sdk_server.url, key=make_key(sdk_server, "member")) as stranger, pytest.raises(keepstate.NotFound):
        stranger.sessions.get(others[0].id)
    with Client(sdk_server.url, key=sdk_server.admin_key) as admin:
        assert admin.sessions.get(others[0].id).id == others[0].id


def test_keys_create_list_revoke(sdk_server: ServerInfo) -> None:
    with Client(sdk_server.url, key=sdk_server.admin_key) as admin:
        created = admin.keys.create("member", name="ci")
        assert created.key and created.role == "member" and created.name == "ci"
        listed = {k.id: k for k in admin.keys.list()}
        assert created.id in listed
        assert listed[created.id].key is None  # no secrets in a listing
        with Client(sdk_server.url, key=created.key) as member:
            member.sessions.create()
            with pytest.raises(keepstate.Forbidden):
                member.keys.list()
            admin.keys.revoke(created.id)
            with pytest.raises(keepstate.Unauthorized):
                member.sessions.create()


def test_session_busy_and_wait_timeout(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    with Client(sdk_server.url, key=keys.member) as client:
        session = client.sessions.create()
        run = client.runs.start(agent_name, {"n": 1}, session_id=session.id)
        with pytest.raises(keepstate.SessionBusy):
            client.runs.start(agent_name, {"n": 2}, session_id=session.id)
        assert client.runs.wait(run.id, timeout=0.2).status == "queued"  # nobody serves it: the wait ends queued
        with ThreadPoolExecutor(1) as pool:  # a wait without end returns when the run ends
            waiting = pool.submit(client.runs.wait, run.id, timeout=HANG_S)
            assert client.runs.cancel(run.id).status == "cancelled"
            assert waiting.result(HANG_S).status == "cancelled"
        assert [r.id for r in client.runs.list(session_id=session.id)] == [run.id]


def test_idempotency_key_returns_the_first_run(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    with Client(sdk_server.url, key=keys.member) as client:
        first = client.runs.start(agent_name, {"a": 1}, idempotency_key="job-7")
        again = client.runs.start(agent_name, {"a": 1}, idempotency_key="job-7")
        assert again.id == first.id
        client.runs.cancel(first.id)


def test_hold_decide_resume_with_run_state(
    sdk_server: ServerInfo, keys: Keys, agent_name: str, background: Callable[[Worker], Any]
) -> None:
    worker = new_worker(sdk_server, keys)

    @worker.agent(agent_name)
    def pay(inv: Invocation) -> Any:
        if inv.kind == "start":
            inv.state.run.put("draft", {"amount": "12.50"})
            inv.hold({"question": "pay 12.50?"})
        return {"paid": inv.decision["approved"], "draft": inv.state.run.get("draft"), "kind": inv.kind}

    background(worker)
    with Client(sdk_server.url, key=keys.member) as client:
        run = client.runs.wait(client.runs.start(agent_name, {"x": 1}).id, timeout=HANG_S)
        assert run.status == "held"
        assert run.hold == {"question": "pay 12.50?"}
        with pytest.raises(keepstate.NotHeld):
            client.runs.decide(client.runs.start(agent_name).id, approved=True)
        assert client.runs.decide(run.id, approved=True, data={"note": "ok"}).status in ("queued", "running", "done")
        done = client.runs.wait(run.id, timeout=HANG_S)
        assert done.status == "done", done
        assert done.output["paid"] is True
        assert done.output["draft"] == {"amount": "12.50"}
        assert done.output["kind"] == "resume"


def test_failure_child_runs_and_user_scope(
    sdk_server: ServerInfo, keys: Keys, agent_name: str, background: Callable[[Worker], Any]
) -> None:
    worker = new_worker(sdk_server, keys, concurrency=2)
    child_name = agent_name + "-child"

    @worker.agent(agent_name)
    def parent(inv: Invocation) -> Any:
        if inv.input == "boom":
            raise ValueError("bad input")
        child = inv.start_run(child_name, {"from": inv.run_id})
        seen = inv.state.user.update("turns", lambda n: n + 1, default=0)
        return {"child": child.id, "child_parent": child.parent_id, "child_user": child.user, "turns": seen}

    @worker.agent(child_name)
    def child(inv: Invocation) -> Any:
        return {"parent": inv.parent_id, "user": inv.user}

    background(worker)
    with Client(sdk_server.url, key=keys.member) as client:
        session = client.sessions.create(user="cust-9")
        failed = client.runs.wait(client.runs.start(agent_name, "boom", session_id=session.id).id, timeout=HANG_S)
        assert failed.status == "failed"
        assert failed.error["type"] == "ValueError"
        assert failed.error["message"] == "bad input"
        done = client.runs.wait(client.runs.start(agent_name, "go", session_id=session.id).id, timeout=HANG_S)
        assert done.status == "done", done
        assert done.output["child_parent"] == done.id
        assert done.output["child_user"] == "cust-9"
        assert done.output["turns"] == 1
        child_run = client.runs.wait(done.output["child"], timeout=HANG_S)
        assert child_run.output == {"parent": done.id, "user": "cust-9"}


def test_state_scopes_over_http(
    sdk_server: ServerInfo, keys: Keys, agent_name: str, background: Callable[[Worker], Any]
) -> None:
    worker = new_worker(sdk_server, keys)

    @worker.agent(agent_name)
    def probe(inv: Invocation) -> Any:
        scope = inv.state.agent
        found: dict[str, Any] = {"absent": list(scope.get_versioned("k")), "default": scope.get("k", "dflt")}
        found["v1"] = scope.put("k", {"n": 1}, if_version=0)
        try:
            scope.put("k", 2, if_version=0)
        except keepstate.VersionConflict as conflict:
            found["conflict"] = conflict.current_version
        found["appended"] = list(scope.append("list", [1, 2]))
        try:
            scope.append("k", [3])
        except keepstate.NotAList:
            found["not_a_list"] = True
        for name in ("a.1", "a.2", "b.1", ".."):
            scope.put(name, name)
        found["keys"] = list(scope.keys(prefix="a."))
        found["dots"] = scope.get("..")
        scope.delete("k", if_version=1)
        found["deleted"] = list(scope.get_versioned("k"))
        found["recreated"] = scope.put("k", 0)
        for kind in ("session", "user"):
            try:
                getattr(inv.state, kind).get("x")
            except (keepstate.NoSession, keepstate.NoUser) as refused:
                found[kind] = refused.code
        try:
            scope.put("big", "x" * (1024 * 1024))
        except keepstate.TooLarge:
            found["too_large"] = True
        return found

    background(worker)
    with Client(sdk_server.url, key=keys.member) as client:
        run = client.runs.wait(client.runs.start(agent_name, {}).id, timeout=HANG_S)
    assert run.status == "done", run
    out = run.output
    assert out["absent"] == [None, 0]
    assert out["default"] == "dflt"
    assert (out["v1"], out["conflict"]) == (1, 1)
    assert out["appended"] == [1, 2]
    assert out["not_a_list"] is True
    assert out["keys"] == [["a.1", 1], ["a.2", 1]]
    assert out["dots"] == ".."
    assert out["deleted"] == [None, 0]
    assert out["recreated"] == 2  # after the delete of version 1: a new version, never a repeat
    assert (out["session"], out["user"]) == ("no_session", "no_user")
    assert out["too_large"] is True


def test_run_token_dies_with_the_invocation(
    sdk_server: ServerInfo, keys: Keys, agent_name: str, background: Callable[[Worker], Any]
) -> None:
    kept: list[Invocation] = []
    worker = new_worker(sdk_server, keys)

    @worker.agent(agent_name)
    def leak(inv: Invocation) -> str:
        kept.append(inv)
        return "ok"

    background(worker)
    with Client(sdk_server.url, key=keys.member) as client:
        assert client.runs.wait(client.runs.start(agent_name).id, timeout=HANG_S).status == "done"
    with pytest.raises(keepstate.Unauthorized):
        kept[0].state.run.get("anything")


def test_heartbeats_keep_a_long_invocation_alive(
    sdk_server: ServerInfo,
    sdk_store: Path,
    keys: Keys,
    agent_name: str,
    background: Callable[[Worker], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent runs until heartbeats were answered, which moved its lease's end on as the server
    stored it (an hour's lease: waiting past a short one's first end raced a loaded machine, a beat
    late by more than the lease lost it); then its state write and result are accepted."""
    worker, outlived = new_worker(sdk_server, keys), list[bool]()
    beats = beat_often(worker, monkeypatch)

    @worker.agent(agent_name)
    def slow(inv: Invocation) -> str:
        granted, answered = lease_until(sdk_store, inv.id), len(beats)
        give_up = time.monotonic() + HANG_S
        while len(beats) < answered + 2 and time.monotonic() < give_up:
            time.sleep(0.05)  # waits for what it can see: beats answered since the grant was read
        outlived.append(len(beats) >= answered + 2 and lease_until(sdk_store, inv.id) > granted)
        inv.state.run.put("still", True)
        return "survived"

    background(worker)
    with Client(sdk_server.url, key=keys.member) as client:
        run = client.runs.wait(client.runs.start(agent_name).id, timeout=HANG_S)
    assert (run.status, run.output) == ("done", "survived"), run
    assert outlived == [True]


def test_cancel_is_seen_by_a_running_agent(
    sdk_server: ServerInfo,
    keys: Keys,
    agent_name: str,
    background: Callable[[Worker], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = new_worker(sdk_server, keys)
    beat_often(worker, monkeypatch)  # the hour's lease would make the first beat 20 minutes away
    seen: list[bool] = []

    @worker.agent(agent_name)
    def patient(inv: Invocation) -> str:
        give_up = time.monotonic() + HANG_S  # bounds a hang: a cancel never mirrored fails below
        while not inv.cancel_requested and time.monotonic() < give_up:
            time.sleep(0.05)
        seen.append(inv.cancel_requested)
        return "stopped early"

    background(worker)
    with Client(sdk_server.url, key=keys.member) as client:
        run = client.runs.start(agent_name)
        give_up = time.monotonic() + HANG_S
        while client.runs.get(run.id).status == "queued":
            assert time.monotonic() < give_up, "the run was never claimed"
            time.sleep(0.05)
        assert client.runs.cancel(run.id).status == "running"  # running: only requested
        final = client.runs.wait(run.id, timeout=HANG_S)
    assert final.status in ("done", "cancelled"), final
    assert seen == [True]  # a heartbeat's answer brought the request to the running agent


async def test_async_client_and_async_worker(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    worker = AsyncWorker(sdk_server.url, key=keys.worker, claim_wait=1, concurrency=2)

    @worker.agent(agent_name)
    async def achat(inv: AsyncInvocation) -> Any:
        history = await inv.state.session.append("history", [inv.input])
        visits = await inv.state.agent.update("visits", lambda n: n + 1, default=0)
        keys_seen = [key async for key, _ in inv.state.session.keys()]
        return {"length": history.length, "visits": visits, "keys": keys_seen}

    task = asyncio.create_task(worker.run())
    try:
        async with AsyncClient(sdk_server.url, key=keys.member) as client:
            session = await client.sessions.create()
            outputs = []
            for message in ("a", "b"):
                run = await client.runs.start(agent_name, message, session_id=session.id)
                outputs.append((await client.runs.wait(run.id, timeout=HANG_S)).output)
            listed = [r.id async for r in client.runs.list(session_id=session.id)]
    finally:
        worker.stop()
        await asyncio.wait_for(task, HANG_S)
    assert outputs == [{"length": 1, "visits": 1, "keys": ["history"]}, {"length": 2, "visits": 2, "keys": ["history"]}]
    assert len(listed) == 2
    assert task.result() == 2
