"""The processes of the double-texting test (``conformance/test_platform_multitask_processes.py``), importable
by a spawned child: starters that start turns with ``multitask`` and workers that claim and run them, each
on its own connection to one store.

A worker logs ``["start", run_id]`` into the session's state after its claim committed and ``["end",
run_id]`` before its finish commits, so if a session's turns never overlap, its log alternates start and
end of one run at a time whatever the interleaving of the processes.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from multiprocessing.synchronize import Event
from typing import Any

import orjson

from keepstate.clock import now_ms
from keepstate.errors import SessionBusy
from keepstate.platform import open_platform
from keepstate.platform.models import Caller
from keepstate.stores.records import Claimed, Outcome, namespace

ENV = "default"
AGENT = "double-text"
ADMIN = Caller(ENV, "admin", "key_starter")
LEASE_MS = 120_000
"""An invocation lease no stall of a loaded machine outlives: a lost lease would end a run ``interrupted``."""


def log_of(session_id: str) -> str:
    """The namespace of a session's log (the agent's session scope)."""
    return namespace(ENV, "session", AGENT, session_id)


def starter(url: str, seed: int, count: int, sessions: list[str], go: Event, out: Any) -> None:
    """Start ``count`` turns in random sessions, mostly ``enqueue``, some ``interrupt``, a few ``reject``;
    report ``(run_id or None, session, multitask)`` for each (None: refused as busy)."""
    out.put(asyncio.run(_start(url, seed, count, sessions, go)))


async def _start(url: str, seed: int, count: int, sessions: list[str], go: Event) -> list[tuple[str | None, str, str]]:
    rng = random.Random(seed)
    platform = await open_platform(url)
    started: list[tuple[str | None, str, str]] = []
    try:
        go.wait(60)
        for n in range(count):
            sid, mode = rng.choice(sessions), rng.choices(["enqueue", "interrupt", "reject"], [7, 2, 1])[0]
            body = {"agent": AGENT, "session_id": sid, "multitask": mode, "input": {"starter": seed, "n": n}}
            try:
                run, _ = await platform.start_run(ADMIN, body)
                started.append((run.id, sid, mode))
            except SessionBusy:
                started.append((None, sid, mode))
            await asyncio.sleep(rng.random() / 200)
    finally:
        await platform.aclose()
    return started


def worker(url: str, claimer: str, seed: int, stop: Event, go: Event) -> None:
    """Claim and run turns until ``stop`` is set and nothing is left to claim."""
    asyncio.run(_work(url, claimer, random.Random(seed), stop, go))


async def _work(url: str, claimer: str, rng: random.Random, stop: Event, go: Event) -> None:
    platform = await open_platform(url)
    try:
        go.wait(60)
        while True:
            token = secrets.token_hex(16)
            now = now_ms()
            claimed = await platform.repo.claim(ENV, [AGENT], token, now + LEASE_MS, now, claimer)
            if claimed is not None:
                await _run(platform.repo, platform.state, claimed, token, rng)
            elif stop.is_set():
                return
            else:
                await asyncio.sleep(0.005)
    finally:
        await platform.aclose()


async def _run(repo: Any, state: Any, claimed: Claimed, token: str, rng: random.Random) -> None:
    """One turn: logged, a few heartbeats (each may bring a cancel request), logged, then ended: failed
    when a cancel was requested (the run ends ``cancelled``), else completed."""
    inv, session_id = claimed.invocation, claimed.run.session_id
    assert session_id is not None
    await state.append(log_of(session_id), "log", [orjson.dumps(["start", inv.run_id])])
    cancel = False
    for _ in range(3):
        await asyncio.sleep(rng.random() / 500)
        beat = await repo.heartbeat(inv.id, token, now_ms(), now_ms() + LEASE_MS)
        assert beat is not None, "a live invocation's heartbeat was refused"
        if cancel := beat:
            break
    await state.append(log_of(session_id), "log", [orjson.dumps(["end", inv.run_id])])
    outcome = Outcome("fail", b'{"type":"Cancelled","message":"a newer turn"}') if cancel else Outcome("complete", b"1")
    assert await repo.finish(inv.id, token, outcome, now_ms()) is not None
