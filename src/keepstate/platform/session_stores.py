"""Session stores served over HTTP: seed 003's store for runtimes that are not Python.

``/v0/session-stores/{space}/sessions/{id}`` gives a Node.js runtime (the TypeScript SDK's
``SessionStore``) and a Python one (``open_session_store("http://…")``) the same leases, fences and
opaque state as ``keepstate.sessions`` has in-process. The rules, once, here:

- who: admin and member keys of an environment; a worker key is 403 (a worker's state is the run
  token's); spaces (an application's name) belong to an environment, which never sees another's;
- where: the store's lease facet (space ``sessions``) under the id ``env/space/id``, every part in the
  key charset, so ``/`` cannot collide (an embedded store's own ids never hold one);
- what: ``state`` is any JSON object up to 1 MiB, opaque here; every write may carry a ``fence``, which
  the store checks in the same atomic step as the write (a stale one: ``LeaseLost``, nothing written);
- waiting for a lease (up to 30 s) never holds the event loop and never hammers the store: in each
  server process one waiter per session asks the store, with back-off up to the facet's ``poll_max``,
  and the others queue behind it in arrival order; a release through this process wakes the asker at
  once (a release through another server is seen at its next try).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from .. import values
from ..clock import now_ms
from ..errors import InvalidRequest, LeaseLost, NotFound, SessionLocked
from ..stores.base import Database, LeaseFacet
from ..stores.records import Blob
from .models import Caller
from .service import require

MAX_WAIT_MS = 30_000
"""The longest a lease request waits for the session (``wait_ms`` above it is taken as this)."""
MAX_TTL_MS = 3_600_000
MAX_MS = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Granted:
    """A granted lease: its fencing token and when it expires unless renewed (ms): this server's
    estimate, by its own clock when the grant came back; the store's own clock decides."""

    fence: int
    expires_at: int


async def open_session_stores(database: Database) -> SessionStores | None:
    """The server's session stores over the store's leases, None when the store declares none."""
    return SessionStores(await database.leases("sessions")) if database.capabilities.leases else None


class SessionStores:
    """Every session-store call of the HTTP API, over the store's lease facet."""

    def __init__(self, facet: LeaseFacet) -> None:
        self.facet = facet
        self.waiters = Waiters()

    async def get(self, caller: Caller, space: str, id: str) -> Blob:
        """The stored session, also after its ``expires_at`` (the runtime decides what expiry means)."""
        found = await self.facet.read(self._id(caller, space, id))
        if found is None:
            raise NotFound(f"no session {id!r} in space {space!r}", id=id)
        return found

    async def put(self, caller: Caller, space: str, id: str, body: dict[str, Any]) -> int:
        """Store ``body["state"]``; the new version."""
        key = self._id(caller, space, id)
        state = body.get("state")
        if not isinstance(state, dict):
            raise InvalidRequest("state must be a JSON object")
        data = values.encode(state)
        values.check_size(len(data), "state")
        stored = Blob(data, _millis(body, "expires_at", required=False))
        version = await self.facet.write(key, stored, _fence(body.get("fence")))
        if version is None:
            raise _stale(id)
        return version

    async def delete(self, caller: Caller, space: str, id: str, fence: str | None) -> None:
        key = self._id(caller, space, id)
        if not await self.facet.remove(key, _fence(_query_int(fence))):
            raise _stale(id)

    async def touch(self, caller: Caller, space: str, id: str, body: dict[str, Any]) -> None:
        """Move the session's expiry; an absent session is left absent."""
        key = self._id(caller, space, id)
        expires_at = _millis(body, "expires_at", required=True)
        assert expires_at is not None
        if not await self.facet.touch(key, expires_at, _fence(body.get("fence"))):
            raise _stale(id)

    async def lease(self, caller: Caller, space: str, id: str, body: dict[str, Any]) -> Granted:
        """Take the session's lease, waiting up to ``wait_ms`` for it; ``SessionLocked`` after that."""
        key = self._id(caller, space, id)
        ttl_ms = _ttl(body)
        wait_ms = min(_count(body, "wait_ms", 0), MAX_WAIT_MS)
        fence = await self.waiters.acquire(self.facet, key, ttl_ms, wait_ms / 1000)
        if fence is None:
            raise SessionLocked(f"session {id!r} stayed locked for {wait_ms} ms", session_id=id)
        return Granted(fence, now_ms() + ttl_ms)

    async def renew(self, caller: Caller, space: str, id: str, body: dict[str, Any]) -> int:
        """Extend the lease of ``fence``; its new expiry. ``LeaseLost`` when a newer lease exists."""
        key = self._id(caller, space, id)
        fence, ttl_ms = _required_fence(body), _ttl(body)
        start = now_ms()
        if not await self.facet.renew(key, fence, ttl_ms):
            raise LeaseLost(f"session {id!r}: the lease of fence {fence} is lost", session_id=id)
        return start + ttl_ms

    async def release(self, caller: Caller, space: str, id: str, body: dict[str, Any]) -> None:
        """Free the lease of ``fence``; a stale fence changes nothing."""
        key = self._id(caller, space, id)
        await self.facet.release(key, _required_fence(body))
        self.waiters.released(key)

    @staticmethod
    def _id(caller: Caller, space: str, id: str) -> str:
        require(caller, "admin", "member")
        return f"{caller.env}/{values.check_key(space, 'space')}/{values.check_key(id, 'session id')}"


@dataclass
class _Waiting:
    """The lease waits of one session in this process: whose turn it is to ask, and a release seen."""

    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: int = 0

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when this process releases the lease meanwhile."""
        self.released.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.released.wait()


class Waiters:
    """One server process's lease waits, per session: the first in line asks the store, the others
    wait for their turn here (arrival order), so a crowd on one session costs the store one asker."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Waiting] = {}

    async def acquire(self, facet: LeaseFacet, id: str, ttl_ms: int, wait_s: float) -> int | None:
        """The lease's fence, or None once ``wait_s`` has passed without it."""
        waiting = self._sessions.setdefault(id, _Waiting())
        waiting.waiters += 1
        give_up = asyncio.get_running_loop().time() + wait_s
        try:
            try:
                async with asyncio.timeout_at(give_up):
                    await waiting.turn.acquire()
            except TimeoutError:
                return None
            try:
                left = max(0.0, give_up - asyncio.get_running_loop().time())
                return await facet.acquire_waiting(id, ttl_ms, left, waiting.pause)
            finally:
                waiting.turn.release()
        finally:
            waiting.waiters -= 1
            if waiting.waiters == 0:
                del self._sessions[id]

    def released(self, id: str) -> None:
        """This process released ``id``'s lease: its asker tries again now."""
        waiting = self._sessions.get(id)
        if waiting is not None:
            waiting.released.set()


def _stale(id: str) -> LeaseLost:
    message = f"session {id!r}: the fence is not the session's current lease; nothing was written"
    return LeaseLost(message, session_id=id)


def _int_in(value: object, low: int, high: int, what: str) -> int:
    """``value`` when it is an integer from ``low`` to ``high``; else InvalidRequest saying ``what`` it must be."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(what)
    return value


def _count(body: dict[str, Any], name: str, default: int | None = None) -> int:
    """A non-negative integer field (``default`` when absent; required without one)."""
    value = body.get(name)
    if value is None and default is not None:
        return default
    return _int_in(value, 0, MAX_MS, f"{name} must be a non-negative integer")


def _millis(body: dict[str, Any], name: str, required: bool) -> int | None:
    """A time in ms since the epoch; None when absent and not ``required``."""
    if body.get(name) is None and not required:
        return None
    return _count(body, name)


def _ttl(body: dict[str, Any]) -> int:
    return _int_in(body.get("ttl_ms"), 1, MAX_TTL_MS, f"ttl_ms must be an integer from 1 to {MAX_TTL_MS}")


def _fence(value: object) -> int | None:
    """A write's optional fence: a positive integer (a token the store gave)."""
    if value is None:
        return None
    return _int_in(value, 1, MAX_MS, "fence must be a positive integer (a lease's fence)")


def _required_fence(body: dict[str, Any]) -> int:
    fence = _fence(body.get("fence"))
    if fence is None:
        raise InvalidRequest("fence is required: the fence of the lease")
    return fence


def _query_int(text: str | None) -> int | str | None:
    """A query parameter that should be an integer: the integer, else the text (refused by its check)."""
    if text is None or text == "":
        return None
    return int(text) if text.isdigit() and len(text) <= 19 else text
