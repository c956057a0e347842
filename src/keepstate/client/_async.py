"""The asynchronous face: ``AsyncClient`` and its ``sessions``/``runs``/``keys``, and the sender under them.

The mirror of ``_sync.py`` with ``await``: only the calls live here (requests are described by
``calls`` and judged by ``_core``); a parity test keeps the method names and signatures aligned.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, TypeVar

import httpx

from . import _core, calls
from ._core import Call, Config
from .records import Agent, Key, Run, Session

T = TypeVar("T")


class AsyncSender:
    """Sends ``Call``s over one ``httpx.AsyncClient`` (connections reused), with retries."""

    def __init__(self, config: Config, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self.http = httpx.AsyncClient(transport=transport, **config.client_options())

    async def send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            delay = None
            try:
                response = await self.http.request(
                    call.method, call.path, params=call.params, content=call.content,
                    headers=call.headers(self.config), timeout=call.timeout(self.config),
                )
            except httpx.TransportError as error:
                delay = _core.retry_after_error(call, attempt, error, self.config)
                if delay is None:
                    raise _core.transport_error(error, self.config) from error
            else:
                headers = response.headers.get("retry-after")
                delay = _core.retry_after_status(call, attempt, response.status_code, headers, self.config)
                if delay is None:
                    return _core.finish(call, response.status_code, response.content)
            await asyncio.sleep(delay)
            attempt += 1

    async def aclose(self) -> None:
        await self.http.aclose()


class AsyncSessions:
    """``client.sessions``, awaited; ``list`` is an async iterator (``async for``)."""

    def __init__(self, sender: AsyncSender) -> None:
        self._send = sender.send

    async def create(self, id: str | None = None, user: str | None = None, metadata: Any = None) -> Session:
        """Create a session; the same ``id`` again by its owner answers the existing one."""
        return await self._send(calls.create_session(id, user, metadata))

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
    """``client.runs``, awaited; ``list`` is an async iterator (``async for``)."""

    def __init__(self, sender: AsyncSender) -> None:
        self._send = sender.send

    async def start(
        self, agent: str, input: Any = None, session_id: str | None = None, idempotency_key: str | None = None,
        queue_timeout: float | None = None,
    ) -> Run:
        return await self._send(calls.start_run(agent, input, session_id, idempotency_key, queue_timeout=queue_timeout))

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
        self, session_id: str | None = None, status: str | None = None, after: str | None = None,
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


class AsyncClient:
    """The caller's side of the HTTP API for asyncio: ``Client``'s calls, awaited. ``aclose()`` it."""

    def __init__(
        self, base_url: str | None = None, key: str | None = None, timeout: float = _core.DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None, retries: int = _core.DEFAULT_RETRIES,
    ) -> None:
        self.config = Config.build(base_url, key, timeout, retries)
        self._sender = AsyncSender(self.config, transport)
        self.sessions = AsyncSessions(self._sender)
        self.runs = AsyncRuns(self._sender)
        self.keys = AsyncKeys(self._sender)
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
