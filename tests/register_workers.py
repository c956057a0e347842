"""Embedded apps that register sessions and write their conversations, run as separate processes."""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from multiprocessing.process import BaseProcess

import keepstate

_spawn = multiprocessing.get_context("spawn")


def registering_app(url: str, agent: str, session_ids: Sequence[str], rounds: int) -> None:
    """Register ``agent`` in each session and append one message there, ``rounds`` times over."""
    with keepstate.open(url) as store:
        for turn in range(rounds):
            for session_id in session_ids:
                store.register_session(session_id, agent, owner=f"key_{agent}")
                store.scope("session", agent=agent, id=session_id).append(
                    "history", [{"role": "user", "content": f"{agent} {turn}"}]
                )


def start_apps(url: str, agents: Sequence[str], session_ids: Sequence[str], rounds: int) -> list[BaseProcess]:
    """One process per agent, started (``join_apps`` waits for them)."""
    procs: list[BaseProcess] = [
        _spawn.Process(target=registering_app, args=(url, agent, list(session_ids), rounds)) for agent in agents
    ]
    for proc in procs:
        proc.start()
    return procs


def join_apps(procs: Sequence[BaseProcess], timeout: float = 120) -> None:
    for proc in procs:
        proc.join(timeout)
        assert proc.exitcode == 0, f"an app process ended with {proc.exitcode}"
