"""``runs.start(..., multitask=)`` in both faces against a real server: enqueued turns run one at a time in
order even with a worker of several threads claiming at once, and an interrupt stops the running turn
through its worker's ``cancel_requested``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sdk_helpers import Keys

import keepstate
from keepstate.client import AsyncClient, Client, Run, Worker
from serverproc import ServerInfo

HANG_S = 60
"""Bounds a wait for something that must happen, so a broken promise fails instead of hanging."""


def logging_worker(server: ServerInfo, keys: Keys, agent: str) -> Worker:
    """Three threads running ``agent``: each turn logs ``["start", n]`` and ``["end", n]`` in the session's
    state; a turn with ``{"until_cancelled": true}`` runs until its cancel is requested, then fails."""
    worker = Worker(server.url, key=keys.worker, concurrency=3, claim_wait=1)

    @worker.agent(agent)
    def turn(inv: keepstate.Invocation) -> Any:
        n = inv.input["n"]
        inv.state.session.append("log", [["start", n]])
        if inv.input.get("until_cancelled"):
            deadline = time.monotonic() + HANG_S
            while not inv.cancel_requested and time.monotonic() < deadline:
                time.sleep(0.02)
            raise RuntimeError("interrupted by a newer turn")
        inv.state.session.append("log", [["end", n]])
        return n

    return worker


def eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG_S
    while not check():
        assert time.monotonic() < deadline, "what must happen did not"
        time.sleep(0.02)


def session_log(client: Client, session_id: str, agent: str) -> list[list[Any]]:
    log: list[list[Any]] = client.state.session(session_id, agent).get("log", default=[])
    return log


def test_sync_enqueued_turns_run_in_order_and_interrupt_stops_the_running_one(
    sdk_server: ServerInfo, keys: Keys, agent_name: str, background: Callable[[Worker], threading.Thread]
) -> None:
    with Client(sdk_server.url, key=keys.member) as client:
        session = client.sessions.create()
        turns = [client.runs.start(agent_name, {"n": 0}, session_id=session.id)]
        turns += [
            client.runs.start(agent_name, {"n": n}, session_id=session.id, multitask="enqueue") for n in (1, 2, 3)
        ]
        with pytest.raises(keepstate.SessionBusy):
            client.runs.start(agent_name, {"n": 9}, session_id=session.id, multitask="reject")
        background(logging_worker(sdk_server, keys, agent_name))
        assert [client.runs.wait(r.id, timeout=HANG_S).status for r in turns] == ["done"] * 4
        expected = [[step, n] for n in range(4) for step in ("start", "end")]
        assert session_log(client, session.id, agent_name) == expected  # never two at once, in start order

        long = client.runs.start(agent_name, {"n": 4, "until_cancelled": True}, session_id=session.id)
        eventually(lambda: client.runs.get(long.id).status == "running")
        waiting = client.runs.start(agent_name, {"n": 5}, session_id=session.id, multitask="enqueue")
        newest = client.runs.start(agent_name, {"n": 6}, session_id=session.id, multitask="interrupt")
        assert newest.status == "queued" and client.runs.get(waiting.id).status == "cancelled"
        ended: list[Run] = [client.runs.wait(r.id, timeout=HANG_S) for r in (long, waiting, newest)]
        assert [r.status for r in ended] == ["cancelled", "cancelled", "done"]
        assert session_log(client, session.id, agent_name)[len(expected) :] == [["start", 4], ["start", 6], ["end", 6]]


async def test_async_multitask_enqueue_interrupt_and_a_bad_value(
    sdk_server: ServerInfo, keys: Keys, agent_name: str
) -> None:
    async with AsyncClient(sdk_server.url, key=keys.member) as client:
        session = await client.sessions.create()
        first = await client.runs.start(agent_name, {"n": 0}, session_id=session.id)
        queued = await client.runs.start(agent_name, {"n": 1}, session_id=session.id, multitask="enqueue")
        assert queued.status == "queued"
        with pytest.raises(keepstate.SessionBusy):
            await client.runs.start(agent_name, {"n": 2}, session_id=session.id)
        with pytest.raises(keepstate.InvalidRequest):
            await client.runs.start(agent_name, session_id=session.id, multitask="later")  # type: ignore[arg-type]
        newest = await client.runs.start(agent_name, {"n": 3}, session_id=session.id, multitask="interrupt")
        assert [(await client.runs.get(r.id)).status for r in (first, queued, newest)] == [
            "cancelled",
            "cancelled",
            "queued",
        ]
    with logging_worker(sdk_server, keys, agent_name) as worker:
        assert worker.poll_once(wait=HANG_S)
        assert not worker.poll_once()
    async with AsyncClient(sdk_server.url, key=keys.member) as client:
        assert (await client.runs.get(newest.id)).status == "done"


def test_a_child_run_started_in_the_busy_session_waits_its_turn_with_enqueue(
    sdk_server: ServerInfo, keys: Keys, agent_name: str, background: Callable[[Worker], threading.Thread]
) -> None:
    """``inv.start_run(..., multitask=)``: from inside its session's running turn, a child with ``reject``
    (the default) is refused ``SessionBusy``; with ``enqueue`` it is queued and runs once the parent ended."""
    worker = Worker(sdk_server.url, key=keys.worker, concurrency=2, claim_wait=1)

    @worker.agent(agent_name)
    def parent(inv: keepstate.Invocation) -> Any:
        if inv.input.get("child"):
            return "child done"
        try:
            inv.start_run(agent_name, {"child": True}, session_id=inv.session_id)
            refused = None
        except keepstate.SessionBusy as error:
            refused = error.code
        child = inv.start_run(agent_name, {"child": True}, session_id=inv.session_id, multitask="enqueue")
        return {"refused": refused, "child": child.id, "child_status": child.status}

    with Client(sdk_server.url, key=keys.member) as client:
        session = client.sessions.create()
        run = client.runs.start(agent_name, {}, session_id=session.id)
        background(worker)
        done = client.runs.wait(run.id, timeout=HANG_S)
        assert done.status == "done", done
        assert done.output["refused"] == "session_busy" and done.output["child_status"] == "queued"
        child = client.runs.wait(done.output["child"], timeout=HANG_S)
        assert (child.status, child.output, child.parent_id) == ("done", "child done", run.id)
