"""The SessionStore contract, on every backend: get/set/delete/touch, expiry, transact, fencing.

No test here races the clock: an expired session is one whose time is already past, a lease that must
end is ended by blocking its holder until another has taken over (not by sleeping a guessed while), a
renewal in flight is held by events, and leases that must not expire are long. Where the clock must
really move past a lease, the test waits for what it can observe, with a deadline that only bounds a hang.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import pytest
from sessions_support import ALL, deaf_renewals

from keepstate import InvalidKey
from keepstate.clock import now_ms
from keepstate.sessions import (
    LeaseLost,
    SessionLocked,
    SessionState,
    SessionStore,
    open_session_store,
)
from keepstate.sessions import base as session_base
from keepstate.stores.base import LeaseFacet
from keepstate.stores.records import Blob

pytestmark = pytest.mark.parametrize("backend_url", ALL, indirect=True)


HANG_S = 60
"""Bounds a wait for something that must happen, so a broken contract fails instead of hanging."""
LONG_LEASE_S = 60
"""A lease no stall of a loaded machine outlives: for tests where expiry is not the point."""


@pytest.fixture
async def store(backend_url: str) -> AsyncIterator[SessionStore]:
    opened = open_session_store(backend_url, lease_seconds=LONG_LEASE_S, wait_timeout=HANG_S)
    yield opened
    await opened.aclose()


async def test_set_get_delete_round_trip(store: SessionStore) -> None:
    state = SessionState(state={"step": 2}, config_hash="c1")
    state.add_message("user", "book a table for two 🍽")
    await store.set("s-1", state)
    got = await store.get("s-1")
    assert got == state
    assert await store.get("other") is None
    await store.delete("s-1")
    assert await store.get("s-1") is None
    await store.delete("s-1")  # absent is fine


async def test_expired_session_reads_as_none_and_touch_extends(store: SessionStore) -> None:
    await store.set("short", SessionState(expires_at=now_ms() - 1))  # its time is past
    await store.set("long", SessionState(expires_at=now_ms() + 3_600_000))
    extended = now_ms() + 7_200_000
    await store.touch("long", extended)
    assert await store.get("short") is None
    kept = await store.get("long")
    assert kept is not None and kept.expires_at == extended
    await store.touch("absent", now_ms() + 1000)
    assert await store.get("absent") is None


async def test_executing_state_never_expires(store: SessionStore) -> None:
    await store.set("busy", SessionState(phase="executing", effect={"name": "pay"}, expires_at=now_ms() - 1))
    got = await store.get("busy")
    assert got is not None and got.effect == {"name": "pay"}


async def test_transact_serialises_read_modify_write(store: SessionStore) -> None:
    await store.set("counter", SessionState(state={"n": 0}))

    async def increment() -> int:
        state = await store.get("counter")
        assert state is not None
        await asyncio.sleep(0)  # awaited work between the read and the write: every other task runs
        state.state["n"] += 1
        await store.set("counter", state)
        return int(state.state["n"])

    results = await asyncio.gather(*(store.transact("counter", increment) for _ in range(15)))
    assert sorted(results) == list(range(1, 16))
    final = await store.get("counter")
    assert final is not None and final.state["n"] == 15


RENEWED_LEASE_S = 2
"""The first lease of the renewal test: short, so the holder's work outlasts it."""


async def test_lease_is_renewed_under_long_work(backend_url: str) -> None:
    """The holder's work outlasts its first lease; a renewal made after that lease's end is followed at
    once by an intruder's try (one attempt), which the renewed lease refuses; then the holder's write lands.
    The renewals extend by LONG_LEASE_S (not the 2 s they ask for), so no stall between the renewal and
    the intruder's try can let the renewed lease lapse first; a first lease that lapsed before its first
    renewal is still renewed (leases are fenced by their token, and nobody tries before that renewal)."""
    store = open_session_store(backend_url, lease_seconds=RENEWED_LEASE_S, wait_timeout=HANG_S)
    intruder = open_session_store(backend_url, wait_timeout=0)
    facet = await store.leases.facet()
    renew, tried, intruded = facet.renew, asyncio.Event(), list[object]()
    granted: list[float] = []  # when the holder's operation began: its lease was granted before

    async def renew_then_intrude(id: str, token: int, ttl_ms: int) -> bool:
        renewed = await renew(id, token, LONG_LEASE_S * 1000)
        past_first_end = granted and asyncio.get_running_loop().time() > granted[0] + RENEWED_LEASE_S
        if renewed and past_first_end and not tried.is_set():
            try:
                intruded.append(await intruder.transact("slow", lambda: asyncio.sleep(0, "intruder got in")))
            except SessionLocked as refused:
                intruded.append(refused)
            tried.set()
        return renewed

    facet.renew = renew_then_intrude  # type: ignore[method-assign]

    async def slow() -> str:
        granted.append(asyncio.get_running_loop().time())
        await asyncio.wait_for(tried.wait(), HANG_S)  # the clock passes the first lease's end meanwhile
        assert [type(outcome) for outcome in intruded] == [SessionLocked], intruded
        await store.set("slow", SessionState(state={"done": True}))
        return "done"

    assert await store.transact("slow", slow) == "done"
    got = await store.get("slow")
    assert got is not None and got.state == {"done": True}
    await intruder.aclose()
    await store.aclose()


async def test_waiter_gives_up_with_session_locked(backend_url: str) -> None:
    holder = open_session_store(backend_url, lease_seconds=LONG_LEASE_S, wait_timeout=5)
    waiter = open_session_store(backend_url, lease_seconds=LONG_LEASE_S, wait_timeout=0.3)
    release = asyncio.Event()
    entered = asyncio.Event()

    async def hold() -> None:
        entered.set()
        await release.wait()

    task = asyncio.create_task(holder.transact("s", hold))
    await entered.wait()
    with pytest.raises(SessionLocked):
        await waiter.transact("s", lambda: asyncio.sleep(0))
    release.set()
    await task
    assert await waiter.transact("s", lambda: asyncio.sleep(0, "free")) == "free"
    await holder.aclose()
    await waiter.aclose()


async def test_different_sessions_do_not_wait_for_each_other(store: SessionStore) -> None:
    inside = {name: asyncio.Event() for name in ("a", "b")}

    async def meet(mine: str, other: str) -> str:
        inside[mine].set()
        await asyncio.wait_for(inside[other].wait(), timeout=HANG_S)  # only if both hold leases at once
        return mine

    a, b = store.transact("a", lambda: meet("a", "b")), store.transact("b", lambda: meet("b", "a"))
    both = await asyncio.gather(a, b)
    assert list(both) == ["a", "b"]


async def test_transact_is_reentrant_and_releases_on_error(store: SessionStore) -> None:
    async def inner() -> str:
        return await store.transact("r", lambda: asyncio.sleep(0, "nested"))

    assert await store.transact("r", inner) == "nested"

    async def boom() -> None:
        raise ValueError("definite")

    with pytest.raises(ValueError):
        await store.transact("r", boom)
    assert await store.transact("r", lambda: asyncio.sleep(0, "again")) == "again"  # not left locked


async def test_stale_token_write_is_refused(backend_url: str) -> None:
    leases = open_session_store(backend_url).leases
    backend = await leases.facet()
    first = await backend.acquire("f", 100)
    assert first is not None
    assert await backend.write("f", Blob(b"{}", None), first)
    second = await _acquired_once_expired(backend, "f")
    assert second > first  # tokens only grow
    assert await backend.acquire("f", 1000) is None  # held by the newer grant
    assert not await backend.write("f", Blob(b'{"stale":1}', None), first)
    assert not await backend.remove("f", first)
    assert not await backend.touch("f", now_ms(), first)
    assert not await backend.renew("f", first, 1000)
    stored = await backend.read("f")
    assert stored is not None and stored.data == b"{}"
    await backend.release("f", first)  # a stale release does not free the newer grant
    assert await backend.acquire("f", 1000) is None
    await backend.release("f", second)
    third = await backend.acquire("f", 1000)
    assert third is not None and third > second
    await leases.aclose()


async def _acquired_once_expired(backend: LeaseFacet, id: str) -> int:
    """A new grant of ``id``, tried until the lease held there has expired (by the store's clock)."""
    deadline = asyncio.get_running_loop().time() + HANG_S
    while (token := await backend.acquire(id, LONG_LEASE_S * 1000)) is None:
        assert asyncio.get_running_loop().time() < deadline, "the lease never expired"
        await asyncio.sleep(0.02)
    return token


async def test_holder_blocked_past_its_lease_gets_lease_lost(backend_url: str) -> None:
    """The event loop of the holder stalls (as under GC or SIGSTOP) until another holder has taken
    over: no renewal can run meanwhile, so the other's wait ends when the 1 s lease expires."""
    store = open_session_store(backend_url, lease_seconds=1, wait_timeout=HANG_S)
    took_over = threading.Event()

    def other_runtime() -> None:
        async def main() -> None:
            other = open_session_store(backend_url, lease_seconds=LONG_LEASE_S, wait_timeout=HANG_S)
            await other.transact("x", lambda: other.set("x", SessionState(state={"by": "other"})))
            await other.aclose()

        asyncio.run(main())
        took_over.set()

    async def stalled() -> None:
        thread = threading.Thread(target=other_runtime)
        thread.start()
        assert took_over.wait(HANG_S), "the other holder never took over"  # blocks this loop: no renewal
        thread.join(HANG_S)
        await store.set("x", SessionState(state={"by": "stale"}))

    with pytest.raises(LeaseLost):
        await store.transact("x", stalled)
    got = await store.get("x")
    assert got is not None and got.state == {"by": "other"}
    await store.aclose()


async def test_ids_are_checked(store: SessionStore) -> None:
    with pytest.raises(InvalidKey):
        await store.get("no spaces/allowed")
    with pytest.raises(InvalidKey):
        await store.transact("", lambda: asyncio.sleep(0))


async def test_operation_blocking_its_loop_still_ends_its_lease(backend_url: str) -> None:
    """set, time.sleep past the lease, set: transact returns and frees the lease (no renewal left running)."""
    store = open_session_store(backend_url, lease_seconds=1, wait_timeout=5)

    async def blocking() -> str:
        await store.set("blk", SessionState(state={"step": 1}))
        time.sleep(1.5)  # the renewal falls due while the loop cannot run it
        await store.set("blk", SessionState(state={"step": 2}))
        return "returned"

    holder = asyncio.create_task(store.transact("blk", blocking))
    await asyncio.wait([holder], timeout=HANG_S)  # not wait_for: it would hand back a result of a swallowed cancel
    assert holder.done(), "transact never returned"
    assert holder.result() == "returned"
    other = open_session_store(backend_url, lease_seconds=1, wait_timeout=2)
    assert await other.transact("blk", lambda: asyncio.sleep(0, "free")) == "free"
    assert [task for task in asyncio.all_tasks() if task.get_name().startswith("keepstate-renew")] == []
    await other.aclose()
    await store.aclose()


async def test_a_renewal_deaf_to_cancellation_cannot_outlive_its_operation(backend_url: str) -> None:
    """The operation ends while a renewal is in flight whose driver loses the cancellation: transact
    still returns, and releases only after that renewal (else it would revive the lease)."""
    store = open_session_store(backend_url, lease_seconds=0.6, wait_timeout=5)
    renewals = await deaf_renewals(store)

    async def until_a_renewal_is_in_flight() -> str:
        await renewals.began.wait()
        return "done"

    holder = asyncio.create_task(store.transact("deaf", until_a_renewal_is_in_flight))
    await asyncio.wait([holder], timeout=HANG_S)
    assert holder.done(), "transact never returned"
    assert holder.result() == "done" and renewals.ended.is_set()
    other = open_session_store(backend_url, wait_timeout=0)  # one attempt: SessionLocked unless free now
    assert await other.transact("deaf", lambda: asyncio.sleep(0, "free")) == "free"
    await other.aclose()
    await store.aclose()


async def test_cancelling_the_holder_while_its_lease_ends_cancels_it(
    backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancellation of the caller that lands while transact waits for the last renewal is not
    swallowed: transact raises CancelledError at once, and the lease is still released after the
    renewal, before aclose returns (its wait for leases still ending is made a hang guard here: its
    5 s bound could pass on a loaded machine before the renewal and release are done)."""
    monkeypatch.setattr(session_base, "CLOSE_WAIT_S", HANG_S)
    store = open_session_store(backend_url, lease_seconds=1.5, wait_timeout=5)
    renewals = await deaf_renewals(store, go_on=False)
    holder = asyncio.create_task(store.transact("cx", renewals.began.wait))
    await asyncio.wait_for(renewals.swallowed.wait(), HANG_S)  # the operation ended; transact waits for the renewal
    renewal_ended_when_cancelled: list[bool] = []
    holder.add_done_callback(lambda _: renewal_ended_when_cancelled.append(renewals.ended.is_set()))
    holder.cancel()
    await asyncio.wait([holder], timeout=HANG_S)
    assert holder.done() and holder.cancelled()
    assert renewal_ended_when_cancelled == [False]  # not kept waiting for the renewal in flight
    renewals.go_on.set()
    await store.aclose()  # waits for the release, which follows the renewal (that renews the lease)
    other = open_session_store(backend_url, wait_timeout=0)
    assert await other.transact("cx", lambda: asyncio.sleep(0, "free")) == "free"
    await other.aclose()


async def test_a_cancelled_call_is_cancelled_at_every_loop_step(store: SessionStore) -> None:
    """A driver may finish its inner work in the step a cancel lands and lose it (redis-py's send
    under ``asyncio.wait_for`` on Python 3.11): the store's calls still end cancelled."""
    await store.set("c", SessionState())
    lost = []
    for steps in range(12):
        call = asyncio.create_task(store.set("c", SessionState(state={"n": steps})))
        for _ in range(steps):
            await asyncio.sleep(0)
        if call.cancel():
            await asyncio.wait([call], timeout=HANG_S)
            if not call.cancelled():
                lost.append(steps)
    assert lost == [], f"cancellations lost at loop-step offsets {lost}"
