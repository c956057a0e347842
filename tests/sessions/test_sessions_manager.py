"""SessionManager's rules on every backend: expiry, config change, the executing marker, reconcile."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sessions_support import ALL

from keepstate import Unavailable
from keepstate.sessions import InterruptedExecution, SessionManager, SessionStore, open_session_store

pytestmark = pytest.mark.parametrize("backend_url", ALL, indirect=True)


@pytest.fixture
async def store(backend_url: str) -> AsyncIterator[SessionStore]:
    opened = open_session_store(backend_url, lease_seconds=1, wait_timeout=5)
    yield opened
    await opened.aclose()


async def test_open_creates_loads_and_saves(store: SessionStore) -> None:
    manager = SessionManager(store, "cfg-1", ttl_seconds=60)
    async with manager.open("s") as session:
        assert session.state.config_hash == "cfg-1" and session.state.history == []
        session.state.add_message("user", "I want seat A1")
        session.state.pending_selection = {"items": [{"id": "A1"}, {"id": "B2"}]}
    async with manager.open("s") as session:
        assert session.state.pending_selection == {"items": [{"id": "A1"}, {"id": "B2"}]}
        assert session.state.message_count == 1
    stored = await store.get("s")
    assert stored is not None and stored.expires_at is not None


async def test_a_failing_block_saves_nothing(store: SessionStore) -> None:
    manager = SessionManager(store, "cfg-1")
    with pytest.raises(RuntimeError):
        async with manager.open("s") as session:
            session.state.state["half"] = "done"
            raise RuntimeError("the turn failed")
    assert await store.get("s") is None


async def test_expired_session_starts_afresh(store: SessionStore) -> None:
    manager = SessionManager(store, "cfg-1", ttl_seconds=0.2)
    async with manager.open("s") as session:
        session.state.add_message("user", "old conversation")
    await asyncio.sleep(0.35)
    async with manager.open("s") as session:
        assert session.state.history == [] and session.state.message_count == 0


async def test_config_change_clears_the_old_state(store: SessionStore) -> None:
    async with SessionManager(store, "cfg-1").open("s") as session:
        session.state.pending_confirmation = {"request": "made under the old rules"}
    async with SessionManager(store, "cfg-2").open("s") as session:
        assert session.state.pending_confirmation is None and session.state.config_hash == "cfg-2"
    stored = await store.get("s")
    assert stored is not None and stored.config_hash == "cfg-2" and stored.pending_confirmation is None


async def test_effect_marker_is_committed_before_the_body(store: SessionStore) -> None:
    manager = SessionManager(store, "cfg-1")
    async with manager.open("s") as session, session.effect("book", {"seat": "A1"}) as effect:
        seen = await store.get("s")  # what any other process would read now
        assert seen is not None and seen.phase == "executing"
        assert seen.effect is not None and seen.effect["name"] == "book"
        effect.result = {"booking": "B-1"}
    stored = await store.get("s")
    assert stored is not None and stored.phase == "idle" and stored.effect is None
    assert stored.last_effect is not None and stored.last_effect["outcome"] == "succeeded"
    assert stored.last_effect["result"] == {"booking": "B-1"}


async def test_definite_failure_returns_to_idle(store: SessionStore) -> None:
    manager = SessionManager(store, "cfg-1")
    with pytest.raises(ValueError):
        async with manager.open("s") as session, session.effect("book", {"seat": "Z9"}):
            raise ValueError("the supplier said: no such seat")
    stored = await store.get("s")
    assert stored is not None and stored.phase == "idle"
    assert stored.last_effect is not None and stored.last_effect["outcome"] == "failed"
    async with manager.open("s"):
        pass


@pytest.mark.parametrize("error", [TimeoutError("slow"), ConnectionError("reset"), Unavailable("down")])
async def test_unknown_outcome_stays_executing_before_expiry_and_config(
    store: SessionStore, error: BaseException
) -> None:
    manager = SessionManager(store, "cfg-1", ttl_seconds=0.2)
    with pytest.raises(type(error)):
        async with manager.open("s") as session, session.effect("pay", {"amount": 10}):
            raise error
    await asyncio.sleep(0.35)  # past the session's expiry
    for other in (manager, SessionManager(store, "cfg-2")):  # expired, and other rules: still interrupted
        with pytest.raises(InterruptedExecution) as caught:
            async with other.open("s"):
                pytest.fail("opened an interrupted session")
        assert caught.value.effect["name"] == "pay" and caught.value.effect["request"] == {"amount": 10}


async def test_reconcile_and_forced_delete(store: SessionStore) -> None:
    manager = SessionManager(store, "cfg-1")
    for sid in ("a", "b"):
        with pytest.raises(TimeoutError):
            async with manager.open(sid) as session, session.effect("pay", {"sid": sid}):
                raise TimeoutError
    with pytest.raises(InterruptedExecution):
        await manager.delete("a")
    await manager.delete("a", force=True)
    assert await store.get("a") is None
    state = await manager.reconcile("b", {"paid": False})
    assert state is not None and state.phase == "idle"
    async with manager.open("b") as session:
        assert session.state.last_effect is not None
        assert session.state.last_effect["outcome"] == "reconciled"
        assert session.state.last_effect["result"] == {"paid": False}
    await manager.delete("b")
    assert await store.get("b") is None
