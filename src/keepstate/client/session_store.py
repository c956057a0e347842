"""The session store over HTTP: ``keepstate.sessions``' lease facet, answered by a keepstate server.

``open_session_store("http://host:8420", key=..., space=...)`` is the same ``SessionStore`` (transact,
renewal, fences through the context variable) as on a local store; only its primitives travel, each
one request to ``/v0/session-stores/{space}/sessions/{id}``, the routes the TypeScript SDK's
``SessionStore`` uses, so a Python worker and a Node.js runtime share one store. Waiting for a lease
is the server's: one request waiting up to 30 s at a time, not polling from here.

The server keeps ``state`` opaque and knows nothing of phases: a state whose expiry is suspended
(executing) is sent without ``expires_at`` (its own ``expires_at`` stays inside it), so it never
expires in the server's store either.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson

from ..errors import InvalidRequest, LeaseLost, SessionLocked
from ..stores.base import LeaseFacet
from ..stores.records import Blob, BlobRecord
from ..values import check_key
from ._async import AsyncSender
from ._core import Call, Config, _none, query, segment

T = TypeVar("T")
L = TypeVar("L")
MAX_WAIT_S = 30.0
"""The longest one lease request waits at the server; a longer wait is several requests."""


class HttpLeases(LeaseFacet):
    """The lease facet of one space of a server's session stores; its own ``LeaseSource`` too."""

    def __init__(self, config: Config, space: str) -> None:
        self.config = config
        self.space = check_key(space, "space")
        self._sender = AsyncSender(config)  # one connection pool per event loop

    async def facet(self) -> LeaseFacet:
        return self

    async def aclose(self) -> None:
        """Close every loop's connections; every call after it raises ``StoreClosed``."""
        await self._sender.aclose()

    async def acquire(self, id: str, ttl_ms: int) -> int | None:
        return await self.acquire_waiting(id, ttl_ms, 0)

    async def acquire_waiting(
        self, id: str, ttl_ms: int, wait_s: float, pause: Callable[[float], Awaitable[object]] = asyncio.sleep
    ) -> int | None:
        """Ask the server, which waits (at most 30 s per request) until granted or ``wait_s`` passes."""
        give_up = asyncio.get_running_loop().time() + wait_s
        while True:
            chunk = min(MAX_WAIT_S, max(0.0, give_up - asyncio.get_running_loop().time()))
            content = orjson.dumps({"ttl_ms": ttl_ms, "wait_ms": int(chunk * 1000)})
            call: Call[int | None] = Call("POST", self._path(id, "/lease"), _fence, content, long_poll=chunk)
            try:
                return await self._send(call)
            except SessionLocked:
                if asyncio.get_running_loop().time() >= give_up:
                    return None

    async def renew(self, id: str, token: int, ttl_ms: int) -> bool:
        content = orjson.dumps({"fence": token, "ttl_ms": ttl_ms})
        return await self._fenced(Call("POST", self._path(id, "/lease/renew"), _true, content, safe=True))

    async def release(self, id: str, token: int) -> None:
        content = orjson.dumps({"fence": token})
        await self._send(Call("POST", self._path(id, "/lease/release"), _none, content, safe=True))

    async def read(self, id: str) -> Blob | None:
        call: Call[Blob | None] = Call("GET", self._path(id), _blob, safe=True, absent=lambda: None)
        return await self._send(call)

    async def write(self, id: str, stored: Blob, token: int | None) -> int | None:
        expires_at = None if stored.pinned else stored.expires_at
        content = _body(state=orjson.Fragment(stored.data), expires_at=expires_at, fence=token)
        call: Call[int | None] = Call("PUT", self._path(id), _version, content, safe=token is not None)
        return await self._send(call) if token is None else await _unless_lost(self._send(call), None)

    async def remove(self, id: str, token: int | None) -> bool:
        return await self._fenced(Call("DELETE", self._path(id), _true, params=query(fence=token), safe=True))

    async def touch(self, id: str, expires_at: int, token: int | None) -> bool:
        content = _body(expires_at=expires_at, fence=token)
        return await self._fenced(Call("POST", self._path(id, "/touch"), _true, content, safe=True))

    def records(self) -> AsyncIterator[BlobRecord]:
        raise InvalidRequest("export reads the server's own store (keepstate export --store URL), not its API")

    async def restore(self, record: BlobRecord) -> None:
        raise InvalidRequest("import writes the server's own store (keepstate import --store URL), not its API")

    async def purge(self, before: int, limit: int) -> int:
        raise InvalidRequest("the server purges its own store (its sweep, or keepstate purge --store URL)")

    async def count_purgeable(self, before: int) -> int:
        raise InvalidRequest("the server purges its own store (its sweep, or keepstate purge --store URL)")

    def _path(self, id: str, tail: str = "") -> str:
        return f"/v0/session-stores/{segment(self.space)}/sessions/{segment(check_key(id, 'session id'))}{tail}"

    async def _fenced(self, call: Call[bool]) -> bool:
        """True when done; False when the server refused the fence (``lease_lost``)."""
        return await _unless_lost(self._send(call), False)

    async def _send(self, call: Call[T]) -> T:
        return await self._sender.send(call)


async def _unless_lost(answer: Awaitable[T], lost: L) -> T | L:
    try:
        return await answer
    except LeaseLost:
        return lost


def _body(**fields: Any) -> bytes:
    return orjson.dumps({name: value for name, value in fields.items() if value is not None})


def _fence(answer: Any) -> int | None:
    return int(answer["fence"])


def _true(answer: Any) -> bool:
    return True


def _version(answer: Any) -> int | None:
    return int(answer["version"])


def _blob(answer: Any) -> Blob | None:
    return Blob(orjson.dumps(answer["state"]), answer.get("expires_at"), False, int(answer["version"]))
