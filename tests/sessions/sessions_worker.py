"""A runtime instance in its own process, driven by the session-store tests.

    sessions_worker.py confirm URL GO READY LEDGER CONCURRENCY SID...   # race to confirm each session
    sessions_worker.py pause URL SID READY LEASE LATE                   # hold a lease; write once LATE appears
    sessions_worker.py effect URL SID READY                             # die (SIGKILL) inside an effect
    sessions_worker.py hold URL SID READY GO                            # hold SID until GO appears
    sessions_worker.py block URL SID READY UNTIL                        # block the loop inside transact

The last stdout line is a JSON report.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from keepstate import KeepstateError
from keepstate.sessions import LeaseLost, SessionManager, SessionState, SessionStore, open_session_store

CONFIG = "cfg-1"
HANG_S = 60
"""Bounds a wait for something that must happen (a file the test makes), so a broken test fails instead of hanging."""
LONG_LEASE_S = 60
"""A lease no stall of a loaded machine outlives: where no other process must take it over."""


async def wait_for(path: Path, timeout: float = HANG_S) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        await asyncio.sleep(0.005)


async def confirm_once(manager: SessionManager, sid: str, ledger: Path) -> str:
    """One confirmation call: book the pending selection if it is still pending."""
    async with manager.open(sid) as session:
        pending = session.state.pending_confirmation
        if pending is None:
            return "nothing"
        async with session.effect("book", pending) as effect:
            await asyncio.sleep(0.01)  # the awaited network call of the booking API
            with ledger.open("a") as f:  # the external effect, visible to the test
                f.write(json.dumps({"sid": sid, "pid": os.getpid(), "item": pending["item"]}) + "\n")
            effect.result = {"booking": f"{sid}-{os.getpid()}"}
        session.state.pending_confirmation = None
        session.state.state.setdefault("bookings", []).append(effect.result)
        return "booked"


async def confirm(url: str, go: str, ready: str, ledger: str, concurrency: str, *sids: str) -> dict[str, Any]:
    # a short lease would let the other process take a session over while a holder's renewal is delayed
    store = open_session_store(url, lease_seconds=LONG_LEASE_S, wait_timeout=HANG_S)
    manager = SessionManager(store, CONFIG, ttl_seconds=600)
    await store.get(sids[0])  # connect before the race starts
    Path(ready).touch()
    await wait_for(Path(go))
    counts: dict[str, Any] = {"booked": 0, "nothing": 0, "errors": []}
    for sid in sids:
        calls = [confirm_once(manager, sid, Path(ledger)) for _ in range(int(concurrency))]
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, BaseException):
                counts["errors"].append(repr(outcome))
            else:
                counts[outcome] += 1
    await store.aclose()
    return counts


async def transact_outcome(store: SessionStore, sid: str, operation: Callable[[], Awaitable[str]]) -> dict[str, Any]:
    """Run ``operation`` in ``sid``'s transact, then close: its result, or ``lease_lost``."""
    try:
        outcome = await store.transact(sid, operation)
    except LeaseLost as error:
        outcome = error.code
    await store.aclose()
    return {"outcome": outcome}


async def pause(url: str, sid: str, ready: str, lease: str, late: str) -> dict[str, Any]:
    store = open_session_store(url, lease_seconds=float(lease), wait_timeout=30)

    async def operation() -> str:
        Path(ready).touch()  # the test SIGSTOPs us now, and lets us go on past the lease
        await wait_for(Path(late), timeout=120)
        await store.set(sid, SessionState(state={"by": "late-worker"}))
        return "wrote"

    return await transact_outcome(store, sid, operation)


async def effect(url: str, sid: str, ready: str) -> dict[str, Any]:
    store = open_session_store(url, lease_seconds=1, wait_timeout=30)
    async with SessionManager(store, CONFIG).open(sid) as session, session.effect("book", {"item": "A1"}):
        Path(ready).touch()  # the test SIGKILLs us here
        await asyncio.sleep(60)
    return {"outcome": "finished"}


async def hold(url: str, sid: str, ready: str, go: str) -> dict[str, Any]:
    store = open_session_store(url, lease_seconds=2, wait_timeout=10)

    async def operation() -> str:
        Path(ready).touch()
        await wait_for(Path(go))
        return "overlapped"

    try:
        return {"outcome": await store.transact(sid, operation)}
    except (KeepstateError, TimeoutError) as error:
        return {"outcome": repr(error)}
    finally:
        await store.aclose()


async def block(url: str, sid: str, ready: str, until: str) -> dict[str, Any]:
    """set, block the event loop (``time.sleep``) past the 1 s lease, set again, return."""
    store = open_session_store(url, lease_seconds=1, wait_timeout=10)

    async def operation() -> str:
        await store.set(sid, SessionState(state={"by": "blocker", "step": 1}))
        Path(ready).touch()
        block_loop(until)
        await store.set(sid, SessionState(state={"by": "blocker", "step": 2}))
        return "returned"

    return await transact_outcome(store, sid, operation)


def block_loop(until: str) -> None:
    """Sleep on the event loop's thread (no task runs, no renewal): UNTIL seconds, or until the file UNTIL exists."""
    if until.replace(".", "", 1).isdigit():
        time.sleep(float(until))
        return
    deadline = time.monotonic() + HANG_S
    while not Path(until).exists() and time.monotonic() < deadline:
        time.sleep(0.01)


COMMANDS = {"confirm": confirm, "pause": pause, "effect": effect, "hold": hold, "block": block}

if __name__ == "__main__":
    report = asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))  # type: ignore[operator]
    print(json.dumps(report), flush=True)
