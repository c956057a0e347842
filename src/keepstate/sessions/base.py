"""The session store: leases, fencing and ``transact``, written once over a store's lease facet.

A store (memory, SQLite, PostgreSQL, Redis) implements only ``stores.base.LeaseFacet``: grant / renew /
release a per-session lease whose token is a fencing counter that only grows, and read / write /
remove / touch a stored blob, optionally *fenced* (the write happens only if the token is still the
session's current one, checked by the store in the same atomic step as the write).

Everything else lives here, once: waiting with back-off (``SessionLocked`` after ``wait_timeout``),
the background renewal every third of the lease, cancelling the operation when the lease is lost,
and the context variable that makes every ``set``/``delete``/``touch`` made inside ``transact``
carry the token without the caller passing it. No database transaction or lock is held across the
awaited work: each primitive is one short atomic statement (or one Lua script).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ..clock import now_ms
from ..errors import LeaseLost, SessionLocked, Unavailable
from ..per_loop import per_loop_databases
from ..stores.base import Database, LeaseFacet
from ..stores.ending import cancel_requests, raise_lost_cancel
from ..stores.records import Blob
from ..values import check_key
from .state import SessionState

T = TypeVar("T")
CLOSE_WAIT_S = 5.0  # longest aclose() waits for leases still ending (a renewal in flight, then a release)


class LeaseSource(Protocol):
    """Where a ``SessionStore`` gets its lease facet: a store's (``Leases``) or a server's over HTTP."""

    async def facet(self) -> LeaseFacet: ...

    async def aclose(self) -> None: ...


class Leases:
    """A store's lease facet of one space, opened on first use in each event loop (a network store
    connects then; an unreachable one raises ``Unavailable`` from that first call). After
    ``aclose()`` every call raises ``StoreClosed``."""

    def __init__(self, database: Database, space: str) -> None:
        database.capabilities.require("leases", database.url)
        self.database = database
        self.space = space
        self._loops = per_loop_databases(database)
        self._facet: tuple[Database, LeaseFacet] | None = None
        """The last loop's Database and its facet: one facet object per Database, made once."""

    async def facet(self) -> LeaseFacet:
        database = await self._loops.current()
        cached = self._facet
        if cached is None or cached[0] is not database:
            cached = self._facet = database, await database.leases(self.space)
        return cached[1]

    async def aclose(self) -> None:
        self._facet = None
        await self._loops.aclose_current()
        self._loops.close()
        self.database.close()


@dataclass(eq=False)
class _Lease:
    """One granted lease as the holding task sees it."""

    store: SessionStore
    id: str
    token: int
    task: asyncio.Task[Any] | None
    in_body: bool = False
    lost: bool = False
    cancelled: bool = False
    unreachable: bool = False  # lost because renewals could not reach the store (not refused)
    ended: bool = False  # the operation is over: the renewer stops, even if its cancellation was lost
    deadline: float = field(default=0.0)


_HELD: contextvars.ContextVar[tuple[_Lease, ...]] = contextvars.ContextVar("keepstate_session_leases", default=())


def _held(store: SessionStore, id: str) -> _Lease | None:
    for lease in _HELD.get():
        if lease.store is store and lease.id == id:
            return lease
    return None


class SessionStore:
    """``get``/``set``/``delete``/``touch`` and ``transact`` over one store's leases.

    Outside ``transact`` writes are plain; inside, they are fenced by the lease's token and raise
    ``LeaseLost`` (writing nothing) when a newer grant exists.
    """

    def __init__(self, leases: LeaseSource, lease_seconds: float = 15, wait_timeout: float = 30) -> None:
        if lease_seconds <= 0 or wait_timeout < 0:
            raise ValueError("lease_seconds must be > 0 and wait_timeout >= 0")
        self.leases = leases
        self.lease_seconds = lease_seconds
        self.wait_timeout = wait_timeout
        self._ending: set[asyncio.Task[None]] = set()  # leases still ending after their holder was cancelled

    async def get(self, id: str) -> SessionState | None:
        """The session's state, or None when absent or expired. Never takes the lease."""
        stored = await (await self.leases.facet()).read(check_key(id, "session id"))
        if stored is None or not stored.live(now_ms()):
            return None
        state = SessionState.from_json(stored.data)
        if stored.expires_at is not None:
            state.expires_at = stored.expires_at
        return state

    async def set(self, id: str, state: SessionState) -> None:
        """Store ``state`` (expiring at ``state.expires_at``; never while it is executing)."""
        stored = Blob(state.to_bytes(), state.expires_at, pinned=state.phase == "executing")
        await self._fenced(id, lambda facet, token: facet.write(id, stored, token))

    async def delete(self, id: str) -> None:
        """Remove the session's state (absent is fine)."""
        await self._fenced(id, lambda facet, token: facet.remove(id, token))

    async def touch(self, id: str, expires_at: int) -> None:
        """Move the session's expiry to ``expires_at`` (ms since epoch); absent is a no-op."""
        await self._fenced(id, lambda facet, token: facet.touch(id, int(expires_at), token))

    async def transact(self, id: str, operation: Callable[[], Awaitable[T]]) -> T:
        """Run ``operation`` holding ``id``'s lease across every process sharing the store.

        Raises ``SessionLocked`` after ``wait_timeout`` of waiting, ``LeaseLost`` when the lease
        is lost mid-operation (the operation is cancelled; none of its later writes land), and
        ``Unavailable`` when the store cannot be reached (also when renewals cannot reach it).
        """
        async with self.hold(id):
            return await operation()

    @contextlib.asynccontextmanager
    async def hold(self, id: str) -> AsyncIterator[None]:
        """``transact`` as an ``async with`` block, for callers whose work is a block of code.

        Re-entrant: holding ``id`` already in this task's context just runs the block.
        """
        check_key(id, "session id")
        if _held(self, id) is not None:
            yield
            return
        lease = _Lease(self, id, await self._acquire(id), asyncio.current_task())
        lease.deadline = time.monotonic() + self.lease_seconds
        reset = _HELD.set((*_HELD.get(), lease))
        renewer = asyncio.create_task(self._renew_loop(lease), name=f"keepstate-renew-{id}")
        lost_in_body = False
        try:
            lease.in_body = True
            try:
                yield
            finally:
                lease.in_body = False
                lost_in_body = lease.lost
        except asyncio.CancelledError:
            if _uncancel(lease):
                raise _lost(lease, "the operation was cancelled") from None
            raise
        finally:
            _HELD.reset(reset)
            await self._end(lease, renewer)
        if lost_in_body:
            _uncancel(lease)
            raise _lost(lease, "while the operation ran")

    async def aclose(self) -> None:
        """Close the backend, once the leases still ending (their holder was cancelled) are released."""
        if self._ending:
            await asyncio.wait(self._ending, timeout=CLOSE_WAIT_S)
        await self.leases.aclose()

    async def __aenter__(self) -> SessionStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- internals ---------------------------------------------------------------------------

    @property
    def _ttl_ms(self) -> int:
        return max(int(self.lease_seconds * 1000), 1)

    async def _fenced(self, id: str, write: Callable[[LeaseFacet, int | None], Awaitable[bool | int | None]]) -> None:
        check_key(id, "session id")
        lease = _held(self, id)
        if await write(await self.leases.facet(), None if lease is None else lease.token):
            return
        if lease is not None:
            lease.lost = True
        raise LeaseLost(f"session {id!r}: a newer lease exists; the write was refused")

    async def _acquire(self, id: str) -> int:
        """The lease, waited for (the facet's way) until granted or ``wait_timeout`` passes."""
        token = await (await self.leases.facet()).acquire_waiting(id, self._ttl_ms, self.wait_timeout)
        if token is None:
            raise SessionLocked(f"session {id!r} stayed locked for {self.wait_timeout} s", session_id=id)
        return token

    async def _end(self, lease: _Lease, renewer: asyncio.Task[None], background: bool = False) -> None:
        """Stop the renewer, then release: never before its last renewal, which would revive the lease.

        Neither step trusts cancellation alone: a driver may lose it (psycopg_pool's wait on Python
        3.11 did), so the renewer also stops on ``lease.ended`` after its renewal in flight. A holder
        cancelled meanwhile is not kept waiting: the rest goes on in the background (``aclose``
        waits for it). An outage lets the lease expire.
        """
        lease.ended = True
        renewer.cancel()
        before = cancel_requests()
        try:
            await _join(renewer, before)
            await _release_quietly(await self.leases.facet(), lease.id, lease.token)
        except asyncio.CancelledError:
            if not background:  # both steps are idempotent: the background run starts over
                ending = asyncio.ensure_future(self._end(lease, renewer, background=True))
                self._ending.add(ending)
                ending.add_done_callback(self._ending.discard)
            raise

    async def _renew_loop(self, lease: _Lease) -> None:
        """Renew every third of the TTL; retry sooner on an outage; give up at the deadline."""
        interval = self.lease_seconds / 3
        wait = interval
        while True:
            await asyncio.sleep(wait)
            try:
                ok: bool | None = await (await self.leases.facet()).renew(lease.id, lease.token, self._ttl_ms)
            except Unavailable:
                ok = None
            if lease.ended:  # the operation ended during the renewal, whose driver may have lost our cancel
                return
            if ok:
                lease.deadline = time.monotonic() + self.lease_seconds
                wait = interval
            elif ok is False or time.monotonic() >= lease.deadline - min(interval, 0.5):
                lease.unreachable = ok is None
                self._lose(lease)
                return
            else:
                wait = min(interval, 0.25)

    @staticmethod
    def _lose(lease: _Lease) -> None:
        lease.lost = True
        if lease.in_body and lease.task is not None and not lease.task.done():
            lease.cancelled = True
            lease.task.cancel()


def _lost(lease: _Lease, how: str) -> LeaseLost | Unavailable:
    """LeaseLost when a newer grant exists; Unavailable when renewals could not reach the store."""
    if lease.unreachable:
        return Unavailable(f"session {lease.id!r}: the store was unreachable and the lease ran out; {how}")
    return LeaseLost(f"session {lease.id!r}: lease lost; {how}")


def _uncancel(lease: _Lease) -> bool:
    """Undo our own cancellation of the holder; True when no other cancellation is pending."""
    if not lease.cancelled or lease.task is None:
        return False
    lease.cancelled = False
    return lease.task.uncancel() == 0


async def _join(task: asyncio.Task[None], before: int) -> None:
    """Wait for ``task`` to end, neither cancelled with it (``shield``) nor raising its own
    cancellation or failure (a renewer that failed has stopped renewing): only the caller's."""
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if cancel_requests() > before or not task.done():
            raise
    except Exception:
        pass
    raise_lost_cancel(before)


async def _release_quietly(facet: LeaseFacet, id: str, token: int) -> None:
    with contextlib.suppress(Unavailable):
        await facet.release(id, token)
