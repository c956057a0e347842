"""Worker functions that tests run in separate processes (importable by a spawned child)."""

from __future__ import annotations

import multiprocessing
import random
from multiprocessing.synchronize import Event
from typing import Any

import keepstate

MIXED_NS = "default/session/chat/mixed"
_spawn = multiprocessing.get_context("spawn")


def mixed_writer(url: str, seed: int, times: int, out: Any) -> None:
    """Random put/append/delete on three keys; report every version a write returned."""
    rng = random.Random(seed)
    won: list[tuple[str, int]] = []
    with keepstate.open(url) as store:
        backend = store.state
        for _ in range(times):
            key = f"k{rng.randrange(3)}"
            action = rng.random()
            try:
                if action < 0.4:
                    won.append((key, backend.append(MIXED_NS, key, [str(seed).encode()])[0]))
                elif action < 0.8:
                    won.append((key, backend.put(MIXED_NS, key, b"[]" if rng.random() < 0.5 else b'"v"')))
                else:
                    backend.delete(MIXED_NS, key)
            except keepstate.NotAList:
                pass
    out.put(won)


def run_mixed_writers(url: str, processes: int = 4, times: int = 60) -> list[tuple[str, int]]:
    """Four processes racing put/append/delete on three keys; every version each write got."""
    out = _spawn.Queue()
    procs = [_spawn.Process(target=mixed_writer, args=(url, seed, times, out)) for seed in range(processes)]
    for proc in procs:
        proc.start()
    won = [pair for _ in procs for pair in out.get(timeout=120)]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    return won


def run_all(target: Any, args: list[tuple[object, ...]]) -> None:
    """One spawned process per argument tuple, each called ``target(*args, go)`` and released at once by
    the event ``go``; every one must exit 0."""
    go: Event = _spawn.Event()
    procs = [_spawn.Process(target=target, args=(*a, go)) for a in args]
    for proc in procs:
        proc.start()
    go.set()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0, f"a worker process failed with exit code {proc.exitcode}"
