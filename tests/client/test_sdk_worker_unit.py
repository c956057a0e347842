"""Worker and AsyncWorker against a fake server on ``httpx.MockTransport``: outcomes, heartbeats, stops."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

import keepstate
from keepstate.client import AsyncInvocation, AsyncWorker, Invocation, Worker

HANG_S = 60
"""Bounds a wait for something that must happen, so a broken worker fails instead of hanging."""


class FakeServer:
    """Hands out queued claims, then 204; records what each invocation reported."""

    def __init__(
        self, *claims: dict[str, Any], lease: float = 30.0, cancel: bool = False, lease_gone: bool = False
    ) -> None:
        self.queue = [self.claim(n, **c) for n, c in enumerate(claims)]
        self.lease, self.cancel, self.lease_gone = lease, cancel, lease_gone
        self.reports: dict[str, tuple[str, Any]] = {}
        self.heartbeats = 0
        self.claim_bodies: list[Any] = []
        self.lock = threading.Lock()

    @staticmethod
    def claim(n: int, **fields: Any) -> dict[str, Any]:
        base = {
            "id": f"i{n}",
            "run_id": f"r{n}",
            "agent": "echo",
            "kind": "start",
            "input": n,
            "decision": None,
            "session_id": None,
            "user": None,
            "parent_id": None,
            "token": f"t{n}",
            "lease_seconds": 30,
        }
        return {**base, **fields}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        with self.lock:
            if path == "/v0/invocations/claim":
                self.claim_bodies.append(json.loads(request.content))
                return httpx.Response(200, json=self.queue.pop(0)) if self.queue else httpx.Response(204)
            _, _, _, inv, action = path.split("/")
            assert request.headers["x-agentos-run-token"] == "t" + inv[1:]
            if action == "heartbeat":
                self.heartbeats += 1
                if self.lease_gone:  # as the server answers once the invocation's lease ran out
                    return httpx.Response(401, json={"error": "unauthorized", "message": "lease ran out"})
                return httpx.Response(200, json={"lease_seconds": self.lease, "cancel_requested": self.cancel})
            self.reports[inv] = (action, json.loads(request.content))
            return httpx.Response(200, json={})


def worker_for(fake: FakeServer, **options: Any) -> Worker:
    return Worker("http://ks.test", key="wk", claim_wait=0, transport=httpx.MockTransport(fake), **options)


def test_outcomes_complete_fail_hold() -> None:
    fake = FakeServer({}, {"input": "boom"}, {"input": "hold"}, {"input": "nan"})
    worker = worker_for(fake)

    @worker.agent("echo")
    def echo(inv: Invocation) -> Any:
        if inv.input == "boom":
            raise ValueError("it broke")
        if inv.input == "hold":
            inv.hold({"question": "ok?"})
        if inv.input == "nan":
            return float("nan")
        return {"got": inv.input, "run": inv.run_id}

    assert worker.run(stop_after=4) == 4
    assert fake.reports["i0"] == ("complete", {"output": {"got": 0, "run": "r0"}})
    assert fake.reports["i1"] == ("fail", {"error": {"type": "ValueError", "message": "it broke"}})
    assert fake.reports["i2"] == ("hold", {"request": {"question": "ok?"}})
    action, body = fake.reports["i3"]
    assert action == "fail"
    assert body["error"]["type"] == "InvalidValue"
    assert fake.claim_bodies[0] == {"agents": ["echo"], "wait": 0}


def test_hold_is_not_swallowed_by_except_exception() -> None:
    fake = FakeServer({})
    worker = worker_for(fake)

    @worker.agent("echo")
    def careless(inv: Invocation) -> Any:
        try:
            inv.hold("q")
        except Exception:
            return "swallowed"

    assert worker.poll_once() is True
    assert fake.reports["i0"] == ("hold", {"request": "q"})
    assert worker.poll_once() is False
    worker.close()


def test_heartbeats_run_in_the_background_and_carry_cancel() -> None:
    fake = FakeServer({"lease_seconds": 0.3}, lease=0.3, cancel=True)
    worker = worker_for(fake)
    seen: list[bool] = []

    @worker.agent("echo")
    def slow(inv: Invocation) -> str:
        deadline = time.monotonic() + HANG_S
        while not inv.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(inv.cancel_requested)
        return "stopped"

    worker.run(stop_after=1)
    assert seen == [True]
    assert fake.heartbeats >= 1
    assert fake.reports["i0"] == ("complete", {"output": "stopped"})


def test_concurrency_runs_invocations_at_the_same_time() -> None:
    fake = FakeServer({}, {}, {})
    worker = worker_for(fake, concurrency=3)
    barrier = threading.Barrier(3, timeout=HANG_S)

    @worker.agent("echo")
    def meet(inv: Invocation) -> int:
        barrier.wait()  # only passes when three run at once
        return int(inv.input)

    assert worker.run(stop_after=3) == 3
    assert [fake.reports[f"i{n}"] for n in range(3)] == [("complete", {"output": n}) for n in range(3)]


def test_stop_finishes_current_invocation_then_returns() -> None:
    fake = FakeServer({}, {})
    worker = worker_for(fake)
    started, stopped = threading.Event(), threading.Event()

    @worker.agent("echo")
    def slow(inv: Invocation) -> str:
        started.set()
        assert stopped.wait(HANG_S)  # runs until the worker was asked to stop
        return "finished"

    runner = threading.Thread(target=worker.run)
    runner.start()
    assert started.wait(HANG_S)
    worker.stop()
    stopped.set()
    runner.join(HANG_S)
    assert not runner.is_alive()
    assert fake.reports == {"i0": ("complete", {"output": "finished"})}
    assert len(fake.queue) == 1  # the second invocation was never claimed


def test_revoked_key_stops_the_worker_with_the_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": "unauthorized", "message": "revoked"})

    worker = Worker("http://ks.test", key="bad", claim_wait=0, transport=httpx.MockTransport(refuse))
    worker.agent("echo")(lambda inv: None)
    with pytest.raises(keepstate.Unauthorized):
        worker.run()


def test_registration_checks_kind_and_name() -> None:
    worker = Worker("http://x")
    with pytest.raises(TypeError, match="AsyncWorker"):

        @worker.agent("a")
        async def wrong(inv: AsyncInvocation) -> None: ...

    with pytest.raises(keepstate.InvalidKey):
        worker.agent("no spaces")(lambda inv: None)
    with pytest.raises(RuntimeError, match="no agents"):
        worker.run()
    with pytest.raises(ValueError):
        Worker("http://x", concurrency=0)


async def test_async_worker_outcomes_and_heartbeat() -> None:
    fake = FakeServer({"lease_seconds": 0.3}, {"input": "hold"}, {"input": "boom"}, lease=0.3, cancel=True)
    worker = AsyncWorker("http://ks.test", key="wk", claim_wait=0, transport=httpx.MockTransport(fake))

    @worker.agent("echo")
    async def echo(inv: AsyncInvocation) -> Any:
        import asyncio

        if inv.input == "hold":
            inv.hold("q")
        if inv.input == "boom":
            raise KeyError("k")
        deadline = time.monotonic() + HANG_S
        while not inv.cancel_requested and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return inv.cancel_requested

    assert await worker.run(stop_after=3) == 3
    assert fake.reports["i0"] == ("complete", {"output": True})
    assert fake.reports["i1"] == ("hold", {"request": "q"})
    assert fake.reports["i2"] == ("fail", {"error": {"type": "KeyError", "message": "'k'"}})


def test_ctrl_c_finishes_the_current_invocation_first() -> None:
    import os
    import signal

    fake = FakeServer({}, {})
    worker = worker_for(fake)
    started, stopping = threading.Event(), threading.Event()
    stop = worker.stop

    def stop_and_tell() -> None:  # what the signal handler calls
        stop()
        stopping.set()

    worker.stop = stop_and_tell  # type: ignore[method-assign]

    @worker.agent("echo")
    def slow(inv: Invocation) -> str:
        started.set()
        assert stopping.wait(HANG_S)  # runs until the signal has asked the worker to stop
        return "finished"

    def interrupt() -> None:
        if started.wait(HANG_S):
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    previous = signal.getsignal(signal.SIGINT)
    assert worker.run() == 1  # on the main thread: the signal asks it to stop, it does not interrupt
    assert fake.reports == {"i0": ("complete", {"output": "finished"})}
    assert signal.getsignal(signal.SIGINT) is previous


async def test_async_worker_sigterm_finishes_the_current_invocation_first() -> None:
    import asyncio
    import os
    import signal

    fake = FakeServer({}, {})
    worker = AsyncWorker("http://ks.test", key="wk", claim_wait=0, transport=httpx.MockTransport(fake))
    stopping = asyncio.Event()
    stop = worker.stop

    def stop_and_tell() -> None:  # what the signal handler calls, on the event loop
        stop()
        stopping.set()

    worker.stop = stop_and_tell  # type: ignore[method-assign]

    @worker.agent("echo")
    async def slow(inv: AsyncInvocation) -> str:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stopping.wait(), HANG_S)  # runs until the signal has asked the worker to stop
        return "finished"

    assert await worker.run() == 1
    assert fake.reports == {"i0": ("complete", {"output": "finished"})}
    assert len(fake.queue) == 1


def test_a_refused_heartbeat_marks_the_lease_lost_and_stops_beating() -> None:
    fake = FakeServer({"lease_seconds": 0.15}, lease_gone=True)
    worker = worker_for(fake)

    @worker.agent("echo")
    def wait_for_loss(inv: Invocation) -> bool:
        deadline = time.monotonic() + HANG_S
        while not inv.lease_lost and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # long enough for two more beats, had it not stopped
        return inv.lease_lost

    assert worker.run(stop_after=1) == 1
    assert fake.reports["i0"] == ("complete", {"output": True})
    assert fake.heartbeats == 1


async def test_an_async_refused_heartbeat_marks_the_lease_lost_and_stops_beating() -> None:
    import asyncio

    fake = FakeServer({"lease_seconds": 0.15}, lease_gone=True)
    worker = AsyncWorker("http://ks.test", key="wk", claim_wait=0, transport=httpx.MockTransport(fake))

    @worker.agent("echo")
    async def wait_for_loss(inv: AsyncInvocation) -> bool:
        deadline = time.monotonic() + HANG_S
        while not inv.lease_lost and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        return inv.lease_lost

    assert await worker.run(stop_after=1) == 1
    assert fake.reports["i0"] == ("complete", {"output": True})
    assert fake.heartbeats == 1
