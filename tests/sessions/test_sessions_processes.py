"""The seed's test, with real OS processes sharing one store (SQLite, PostgreSQL, Redis).

Two runtime instances race many confirmations of one pending selection: one booking, every trial.
A worker paused (SIGSTOP) past its lease cannot write late; a worker killed (SIGKILL) inside an
effect leaves an InterruptedExecution for the next opener; different sessions overlap.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
from sessions_support import SHARED, finish, spawn, wait_for_file

from keepstate.sessions import InterruptedExecution, SessionManager, SessionState, open_session_store

pytestmark = pytest.mark.parametrize("backend_url", SHARED, indirect=True)
CONFIG = "cfg-1"  # the workers' config hash
TRIALS = 4
CONCURRENCY = 6


async def test_concurrent_confirmations_book_exactly_once(backend_url: str, tmp_path: Path) -> None:
    store = open_session_store(backend_url)
    manager = SessionManager(store, CONFIG, ttl_seconds=600)
    sids = [f"trial-{n}" for n in range(TRIALS)]
    for sid in sids:
        async with manager.open(sid) as session:
            session.state.pending_confirmation = {"item": f"seat-{sid}"}
    ledger, go = tmp_path / "ledger.jsonl", tmp_path / "go"
    ready = [tmp_path / "ready-a", tmp_path / "ready-b"]
    workers = [spawn("confirm", backend_url, str(go), str(r), str(ledger), str(CONCURRENCY), *sids) for r in ready]
    for r in ready:
        await wait_for_file(r)
    go.touch()
    reports = [await asyncio.to_thread(finish, w) for w in workers]

    assert [r["errors"] for r in reports] == [[], []]
    assert sum(r["booked"] for r in reports) == TRIALS
    assert sum(r["nothing"] for r in reports) == TRIALS * (2 * CONCURRENCY - 1)
    effects = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert sorted(e["sid"] for e in effects) == sids  # exactly one effect per trial
    for sid in sids:
        state = await store.get(sid)
        assert state is not None and state.pending_confirmation is None
        assert len(state.state["bookings"]) == 1  # exactly one write
        assert state.phase == "idle" and state.last_effect is not None
    await store.aclose()


async def test_paused_worker_cannot_write_after_its_lease(backend_url: str, tmp_path: Path) -> None:
    """SIGSTOP the holder (1 s lease) in its operation; take over (the wait ends when its lease has
    expired, as no renewal can run); SIGCONT it and let it write: refused, whatever the timing."""
    ready, late = tmp_path / "ready", tmp_path / "write-late"
    worker = spawn("pause", backend_url, "s-1", str(ready), "1", str(late))
    await wait_for_file(ready)
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        store = open_session_store(backend_url, lease_seconds=60, wait_timeout=60)

        async def take_over() -> None:
            await store.set("s-1", SessionState(state={"by": "new-holder"}))

        await store.transact("s-1", take_over)
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        late.touch()
    report = await asyncio.to_thread(finish, worker)
    assert report["outcome"] == "lease_lost"
    state = await store.get("s-1")
    assert state is not None and state.state == {"by": "new-holder"}
    await store.aclose()


async def test_worker_killed_inside_effect_leaves_interrupted_execution(backend_url: str, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    worker = spawn("effect", backend_url, "s-k", str(ready))
    await wait_for_file(ready)
    worker.kill()
    worker.communicate(timeout=30)
    assert worker.returncode == -signal.SIGKILL
    store = open_session_store(backend_url, lease_seconds=1, wait_timeout=10)
    manager = SessionManager(store, CONFIG)
    with pytest.raises(InterruptedExecution) as caught:
        async with manager.open("s-k"):
            pytest.fail("an interrupted session must not open")
    assert caught.value.effect["name"] == "book"
    assert caught.value.effect["request"] == {"item": "A1"}
    state = await manager.reconcile("s-k", {"booked": True, "checked": "with the supplier"})
    assert state is not None and state.phase == "idle"
    async with manager.open("s-k") as session:
        assert session.state.last_effect is not None
        assert session.state.last_effect["outcome"] == "reconciled"
    await store.aclose()


async def test_different_sessions_overlap_across_processes(backend_url: str, tmp_path: Path) -> None:
    worker_in, parent_in = tmp_path / "worker-in", tmp_path / "parent-in"
    worker = spawn("hold", backend_url, "s-a", str(worker_in), str(parent_in))
    store = open_session_store(backend_url, lease_seconds=2, wait_timeout=10)

    async def operation() -> None:
        await wait_for_file(worker_in)  # the worker is inside s-a's transact while we are inside s-b's
        parent_in.touch()

    await store.transact("s-b", operation)
    report = await asyncio.to_thread(finish, worker)
    assert report["outcome"] == "overlapped"
    await store.aclose()


async def test_operation_blocking_its_loop_returns_and_frees_the_lease(backend_url: str, tmp_path: Path) -> None:
    """set, time.sleep past the 1 s lease, set: transact returns, the process exits, the lease is free."""
    worker = spawn("block", backend_url, "s-blk", str(tmp_path / "ready"), "1.5")
    report = await asyncio.to_thread(finish, worker, 30)  # a lease renewed forever would hang here
    assert report["outcome"] == "returned"
    store = open_session_store(backend_url, lease_seconds=1, wait_timeout=5)  # SessionLocked if still held
    state = await store.transact("s-blk", lambda: store.get("s-blk"))
    assert state is not None and state.state == {"by": "blocker", "step": 2}
    await store.aclose()


async def test_write_after_blocking_past_a_newer_grant_is_refused(backend_url: str, tmp_path: Path) -> None:
    """While the holder's loop is blocked past its lease another process is granted it: the holder's
    next write is refused (LeaseLost), never written, and it still exits."""
    ready, taken = tmp_path / "ready", tmp_path / "taken"
    worker = spawn("block", backend_url, "s-tk", str(ready), str(taken))
    try:
        await wait_for_file(ready)
        store = open_session_store(backend_url, lease_seconds=1, wait_timeout=10)
        await store.transact("s-tk", lambda: store.set("s-tk", SessionState(state={"by": "new-holder"})))
    finally:
        taken.touch()  # unblocks the worker
    report = await asyncio.to_thread(finish, worker, 30)
    assert report["outcome"] == "lease_lost"
    state = await store.transact("s-tk", lambda: store.get("s-tk"))  # and the lease is free again
    assert state is not None and state.state == {"by": "new-holder"}
    await store.aclose()
