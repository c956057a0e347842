"""The asynchronous face: ``AsyncClient`` and its ``sessions``/``runs``/``keys``, and the sender under them.

The mirror of ``_sync.py`` with ``await``: only the calls live here (requests are described by
``calls`` and judged by ``_core``); a parity test keeps the method names and signatures aligned.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from ..errors import KeepstateError, StoreClosed
from ..memory import AsyncMemory
from ..per_loop import PerLoop
from ..scope import AsyncScope
from . import _core, calls
from ._core import Call, Config
from ._events import EventStream, dropped
from .invocation import AsyncHttpOps
from .memory_calls import AsyncHttpMemoryOps, CallerMemory
from .records import Agent, EventPage, Key, Run, RunEvent, Session
from .state_calls import StateTarget

T = TypeVar("T")


class AsyncSender:
    """Sends ``Call``s over one ``httpx.AsyncClient`` per event loop (connections reused within a loop:
    httpx's belong to the loop that opened them, and a sync wrapper may run each call under a new
    one), with retries. After ``aclose()`` a call raises ``StoreClosed``."""

    def __init__(self, config: Config, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self._clients = PerLoop(
            lambda: httpx.AsyncClient(transport=transport, **config.client_options()), httpx.AsyncClient.aclose
        )

    @property
    def closed(self) -> bool:
        return self._clients.closed

    async def client(self) -> httpx.AsyncClient:
        """This loop's ``httpx.AsyncClient``; ``StoreClosed`` once the client was closed."""
        return await self._current()

    async def send(self, call: Call[T]) -> T:
        http = await self._current()
        attempt = 0
        while True:
            delay = None
            try:
                response = await http.request(**call.request(self.config))
            except httpx.TransportError as error:
                delay = _core.retry_after_error(call, attempt, error, self.config)
                if delay is None:
                    raise _core.transport_error(error, self.config) from error
            else:
                delay = _core.retry_after_status(call, attempt, response, self.config)
                if delay is None:
                    return _core.finish(call, response.status_code, response.content)
            await asyncio.sleep(delay)
            attempt += 1

    async def _current(self) -> httpx.AsyncClient:
        try:
            return await self._clients.current()
        except StoreClosed:
            raise StoreClosed("this client is closed: make a new one to use it") from None

    async def aclose(self) -> None:
        """Close this loop's connections now, the other loops' on their loops; again is a no-op."""
        await self._clients.aclose_current()
        self._clients.close()


class AsyncSessions:
    """``client.sessions``, awaited; ``list`` is an async iterator (``async for``)."""

    def __init__(self, sender: AsyncSender) -> None:
        self._send = sender.send

    async def create(self, id: str | None = None, user: str | None = None, metadata: Any = None) -> Session:
        """Create a session; the same ``id`` again by its owner answers the existing one."""
        return await self._send(calls.create_session(id, user, metadata))

    async def fork(
        self,
        session_id: str,
        lists: Mapping[str, int] | None = None,
        id: str | None = None,
        user: str | None = None,
        metadata: Any = None,
    ) -> Session:
        """A new session of this key, ``parent`` the source, holding a copy of the source's session-scope
        state (every agent's) as of one instant; each list named in ``lists`` (``{"AGENT/KEY": N}``) is cut
        to its first N items there. ``user`` defaults to the source's. NotAList (and no session) when a
        named key holds another value; NotFound for a session this key may not see."""
        return await self._send(calls.fork_session(session_id, lists, id, user, metadata))

    async def get(self, session_id: str) -> Session:
        return await self._send(calls.get_session(session_id))

    async def list(
        self, user: str | None = None, after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[Session]:
        """Sessions oldest first, fetched page by page; at most ``limit`` of them when given."""
        remaining = limit
        while remaining is None or remaining > 0:
            page, after = await self._send(calls.list_sessions(user, after, remaining))
            for item in page[:remaining]:
                yield item
            remaining = None if remaining is None else remaining - len(page)
            if after is None or not page:
                return

    async def update(self, session_id: str, metadata: Any) -> Session:
        return await self._send(calls.update_session(session_id, metadata))

    async def delete(self, session_id: str) -> None:
        await self._send(calls.delete_session(session_id))


class AsyncRuns:
    """``client.runs``, awaited; ``list`` and ``stream`` are async iterators (``async for``)."""

    def __init__(self, sender: AsyncSender) -> None:
        self._sender = sender
        self._send = sender.send

    async def start(
        self,
        agent: str,
        input: Any = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        queue_timeout: float | None = None,
        multitask: calls.Multitask | None = None,
    ) -> Run:
        """``Runs.start``, awaited: ``multitask`` is ``"reject"`` (the default), ``"enqueue"`` or ``"interrupt"``."""
        call = calls.start_run(
            agent, input, session_id, idempotency_key, queue_timeout=queue_timeout, multitask=multitask
        )
        return await self._send(call)

    async def get(self, run_id: str) -> Run:
        return await self._send(calls.get_run(run_id))

    async def wait(self, run_id: str, timeout: float = 30) -> Run:
        """The run once it is no longer queued or running, or as it is when ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        run = await self._send(calls.get_run(run_id, wait=timeout))
        while not run.finished and (left := deadline - time.monotonic()) > 0:
            run = await self._send(calls.get_run(run_id, wait=left))
        return run

    async def list(
        self,
        session_id: str | None = None,
        status: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[Run]:
        remaining = limit
        while remaining is None or remaining > 0:
            page, after = await self._send(calls.list_runs(session_id, status, after, remaining))
            for item in page[:remaining]:
                yield item
            remaining = None if remaining is None else remaining - len(page)
            if after is None or not page:
                return

    async def decide(self, run_id: str, approved: bool, data: Any = None) -> Run:
        return await self._send(calls.decide(run_id, approved, data))

    async def cancel(self, run_id: str) -> Run:
        return await self._send(calls.cancel_run(run_id))

    async def events(self, run_id: str, after: int = 0, limit: int | None = None) -> EventPage:
        return await self._send(calls.run_events(run_id, after, limit))

    async def stream(self, run_id: str, after: int = 0) -> AsyncGenerator[RunEvent, None]:
        """``Runs.stream``, as an async iterator; ``aclose()`` it (or leave its ``async for``) to close
        the connection. One generator with no generator of its own inside: a loop ending while the stream
        is left open closes it once (nested ones were each closed by the loop, one while the other closed
        it: "aclose(): asynchronous generator is already running")."""
        stream = EventStream(self._sender.config, run_id, after)
        while True:
            try:
                path, params, headers = stream.request()
                http = await self._sender.client()
                try:
                    async with http.stream(
                        "GET", path, params=params, headers=headers, timeout=stream.timeout()
                    ) as got:
                        refusal = await got.aread() if got.status_code != 200 else b""
                        stream.opened(got.status_code, got.headers.get("content-type"), refusal)
                        async for chunk in got.aiter_bytes():
                            for event in stream.feed(chunk):
                                yield event
                except httpx.TransportError as error:
                    raise dropped(error, self._sender.config) from error
                if stream.closed_cleanly():
                    return
                if stream.needs_check() and stream.checked(await self.get(run_id)):
                    while True:  # the rest of a run that ended while the stream was down, as pages
                        fresh, last = stream.drained(await self._send(stream.drain_call()))
                        for event in fresh:
                            yield event
                        if last:
                            return
                delay = stream.retry_in()
            except KeepstateError as error:
                delay = stream.retry_in(error)
            await asyncio.sleep(delay)


class AsyncAgents:
    """``client.agents``, awaited."""

    def __init__(self, sender: AsyncSender) -> None:
        self._send = sender.send

    async def list(self) -> builtins.list[Agent]:
        return await self._send(calls.list_agents())


class AsyncKeys:
    """``client.keys`` (admin), awaited."""

    def __init__(self, sender: AsyncSender) -> None:
        self._send = sender.send

    async def create(self, role: str, name: str | None = None) -> Key:
        return await self._send(calls.create_key(role, name))

    async def list(self) -> builtins.list[Key]:
        return await self._send(calls.list_keys())

    async def revoke(self, id: str) -> None:
        await self._send(calls.revoke_key(id))


class AsyncCallerState:
    """``client.state``: state read and written with the client's key ("State for callers"), the same
    scope calls and errors as an agent's; 404 for a session or run this key may not see, 403 for a
    member on the agent and user scopes."""

    def __init__(self, sender: AsyncSender) -> None:
        self._send = sender.send

    def session(self, session_id: str, agent: str) -> AsyncScope:
        """The session-scope state of one agent in a session (its owner, admins)."""
        return self._scope("sessions", session_id, "state", agent)

    def run(self, run_id: str) -> AsyncScope:
        """A run's run-scope state, of its agent (its owner, admins)."""
        return self._scope("runs", run_id, "state")

    def agent(self, agent: str) -> AsyncScope:
        """An agent's agent-scope state (admins)."""
        return self._scope("agents", agent, "state")

    def user(self, user: str, agent: str) -> AsyncScope:
        """An end user's user-scope state of one agent (admins)."""
        return self._scope("users", user, "state", agent)

    def _scope(self, *parts: str) -> AsyncScope:
        return AsyncScope(AsyncHttpOps(self._send, StateTarget.of_caller(*parts)))


class AsyncClient:
    """The caller's side of the HTTP API for asyncio: ``Client``'s calls, awaited. ``aclose()`` it."""

    def __init__(
        self,
        base_url: str | None = None,
        key: str | None = None,
        timeout: float = _core.DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        retries: int = _core.DEFAULT_RETRIES,
    ) -> None:
        self.config = Config.build(base_url, key, timeout, retries)
        self._sender = AsyncSender(self.config, transport)
        self.sessions = AsyncSessions(self._sender)
        self.runs = AsyncRuns(self._sender)
        self.keys = AsyncKeys(self._sender)
        self.state = AsyncCallerState(self._sender)
        self.memory: CallerMemory[AsyncMemory] = CallerMemory(
            lambda target: AsyncMemory(AsyncHttpMemoryOps(self._sender.send, target))
        )
        self.agents = AsyncAgents(self._sender)

    @property
    def base_url(self) -> str:
        return self.config.base_url

    async def aclose(self) -> None:
        await self._sender.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()
