"""Double-texting across real processes: starters start turns with ``enqueue``, ``interrupt`` and ``reject``
in a few sessions while workers in other processes claim and run them, all on one store (each process its
own connection; memory is one process by definition).

What must hold whatever the interleaving (``multitask_processes.py`` has the processes): a session's log,
written by the workers after each claim and before each finish, alternates the start and end of one run
at a time (never two of its runs running at once); its runs start in the order they were started; every
run started ran exactly once (``done``) or was cancelled, by an interrupt, before or while it ran.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections import Counter
from typing import Any

import orjson
import pytest

from backends import declaring
from claimers import claimer
from keepstate.platform import open_platform
from keepstate.stores.records import RunFilter
from multitask_processes import ADMIN, AGENT, ENV, log_of, starter, worker

pytestmark = pytest.mark.parametrize(
    "backend_url", [name for name in declaring("platform") if name in declaring("shared")], indirect=True
)
_spawn = multiprocessing.get_context("spawn")
STARTERS, WORKERS, TURNS, SESSIONS = 3, 3, 24, 3
HANG_S = 180
"""Bounds every wait for the processes, so a wedged session fails the test instead of hanging it."""


async def _prepare(url: str, sessions: list[str]) -> str:
    platform = await open_platform(url)
    try:
        for sid in sessions:
            await platform.create_session(ADMIN, {"id": sid})
        return await claimer(platform.repo, ENV)
    finally:
        await platform.aclose()


async def _settled(url: str) -> bool:
    """Whether no run of the agent is queued or running any more."""
    platform = await open_platform(url)
    try:
        for status in ("queued", "running"):
            if await platform.repo.list_runs(RunFilter(ENV, None, None, status, 0, 1, agent=AGENT)):
                return False
        return True
    finally:
        await platform.aclose()


async def _read(url: str, sessions: list[str]) -> tuple[dict[str, Any], dict[str, list[list[str]]]]:
    """Every run of the sessions by id, and each session's log."""
    platform = await open_platform(url)
    try:
        runs = {
            r.id: r for sid in sessions for r in await platform.repo.list_runs(RunFilter(ENV, None, sid, None, 0, 1000))
        }
        logs = {}
        for sid in sessions:
            entry = await platform.state.get(log_of(sid), "log")
            logs[sid] = [] if entry is None else orjson.loads(entry.data)
        return runs, logs
    finally:
        await platform.aclose()


def test_turns_from_many_processes_run_one_at_a_time_in_start_order_each_once_or_cancelled(backend_url: str) -> None:
    sessions = [f"double-text-{n}" for n in range(SESSIONS)]
    key = asyncio.run(_prepare(backend_url, sessions))
    go, stop, out = _spawn.Event(), _spawn.Event(), _spawn.Queue()
    starters = [
        _spawn.Process(target=starter, args=(backend_url, n, TURNS, sessions, go, out)) for n in range(STARTERS)
    ]
    workers = [_spawn.Process(target=worker, args=(backend_url, key, n, stop, go)) for n in range(WORKERS)]
    for proc in starters + workers:
        proc.start()
    go.set()
    try:
        reports = [report for _ in starters for report in out.get(timeout=HANG_S)]
        deadline = time.monotonic() + HANG_S
        while not asyncio.run(_settled(backend_url)):
            assert time.monotonic() < deadline, "runs left queued or running: a session is wedged"
            time.sleep(0.1)
    finally:
        stop.set()
        for proc in starters + workers:
            proc.join(HANG_S)
    assert [proc.exitcode for proc in starters + workers] == [0] * (STARTERS + WORKERS)

    runs, logs = asyncio.run(_read(backend_url, sessions))
    started = {run_id: (sid, mode) for run_id, sid, mode in reports if run_id is not None}
    assert set(started) == set(runs), "every start that answered made exactly one run, and nothing else did"
    assert Counter(mode for _, mode in started.values())["enqueue"] > 0
    for sid in sessions:
        log = logs[sid]
        steps, ids = [step for step, _ in log], [run_id for _, run_id in log]
        assert steps == ["start", "end"] * (len(log) // 2), f"two runs of {sid} ran at once: {log}"
        assert ids[::2] == ids[1::2]
        ran = ids[::2]
        assert len(ran) == len(set(ran)), f"a run of {sid} ran twice"
        assert ran == sorted(ran, key=lambda run_id: runs[run_id].seq), f"the runs of {sid} started out of order"
        for run in (r for r in runs.values() if r.session_id == sid):
            assert run.status in ("done", "cancelled"), f"{run.id} ended {run.status}"
            assert (run.status == "done") <= (run.id in ran), f"{run.id} is done but never ran"
            assert (run.id in ran and run.status == "cancelled") <= run.cancel_requested
    assert any(r.status == "cancelled" for r in runs.values()), "no interrupt cancelled anything: the race was not made"
