"""The keepstate SDK: the caller's ``Client``/``AsyncClient`` and the agent's ``Worker``/``AsyncWorker``.

It follows httpx's conventions: a sync and an async client with the same method names,
``close``/``aclose``, context managers and an injectable transport. Requests are described once,
I/O-free (``calls``, ``_core``); the sync and async modules only send them.
"""

from __future__ import annotations

from ._async import AsyncAgents, AsyncCallerState, AsyncClient, AsyncKeys, AsyncRuns, AsyncSessions
from ._sync import Agents, CallerState, Client, Keys, Runs, Sessions
from .async_worker import AsyncWorker
from .invocation import AsyncInvocation, AsyncState, HoldRequested, Invocation, State
from .memory_calls import CallerMemory
from .records import Agent, Claim, EventPage, Heartbeat, Key, Run, RunEvent, Session
from .worker import Worker

__all__ = [
    "Agent",
    "Agents",
    "AsyncAgents",
    "AsyncCallerState",
    "AsyncClient",
    "AsyncInvocation",
    "AsyncKeys",
    "AsyncRuns",
    "AsyncSessions",
    "AsyncState",
    "AsyncWorker",
    "CallerMemory",
    "CallerState",
    "Claim",
    "Client",
    "EventPage",
    "Heartbeat",
    "HoldRequested",
    "Invocation",
    "Key",
    "Keys",
    "Run",
    "RunEvent",
    "Runs",
    "Session",
    "Sessions",
    "State",
    "Worker",
]
