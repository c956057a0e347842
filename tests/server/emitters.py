"""Worker processes that emit into one run through real servers (importable by a spawned child)."""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Event
from typing import Any

import httpx

from store_workers import run_all

_spawn = multiprocessing.get_context("spawn")


def emitter(urls: list[str], invocation: str, token: str, writer: int, calls: int, out: Any, go: Event) -> None:
    """``calls`` emits of four events ``[writer, call, n]``, through each of ``urls`` in turn; reports
    ``(writer, call, seq)`` for every emit, ``seq`` the one its answer gave."""
    clients = [httpx.Client(base_url=url, timeout=60) for url in urls]
    answered: list[tuple[int, int, int]] = []
    go.wait(60)
    for call in range(calls):
        events = [{"type": "part", "data": [writer, call, n]} for n in range(4)]
        answer = clients[call % len(clients)].post(
            f"/v0/invocations/{invocation}/events", json={"events": events}, headers={"x-agentos-run-token": token}
        )
        answer.raise_for_status()
        answered.append((writer, call, answer.json()["seq"]))
    for client in clients:
        client.close()
    out.put(answered)


def emit_from_processes(urls: list[str], invocation: str, token: str, writers: int, calls: int) -> list[Any]:
    """``writers`` processes emitting at once (released together); every answer of every one (a few hundred
    bytes per process: the pipe holds them while ``run_all`` waits for the processes)."""
    out = _spawn.Queue()
    run_all(emitter, [(urls, invocation, token, writer, calls, out) for writer in range(writers)])
    return [item for _ in range(writers) for item in out.get(timeout=60)]
