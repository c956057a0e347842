"""Each adapter held the way users hold it, on every store: made ``from_store`` of a store opened in
passing (the store lives as long as the adapter uses it), used after its own ``close()`` (a clear
``StoreClosed``, never a RuntimeError of an executor or a loop), closed twice, and a shared store
left open and working after the adapter that borrowed it is closed."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import keepstate
from backends import declaring

NO_ADK = set(declaring()) - set(declaring("cross_scope_batches"))
"""Stores the ADK service refuses (a Redis Cluster: each event is a batch across scopes)."""

Use = Callable[[Any], Awaitable[Any]]
"""One real call of an adapter, through the framework's own interface; returns what it read back."""


def _saver(store: keepstate.Store) -> Any:
    from keepstate.integrations.langgraph import KeepstateSaver

    return KeepstateSaver.from_store(store)


async def _use_saver(saver: Any) -> Any:
    from langgraph.checkpoint.base import empty_checkpoint

    config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}", "checkpoint_ns": ""}}
    saved = await asyncio.to_thread(saver.put, config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    found = await asyncio.to_thread(saver.get_tuple, saved)
    return found.checkpoint["id"] if found else None


def _lg_store(store: keepstate.Store) -> Any:
    from keepstate.integrations.langgraph import KeepstateStore

    return KeepstateStore.from_store(store)


async def _use_lg_store(lg: Any) -> Any:
    await asyncio.to_thread(lg.put, ("users", "u1"), "prefs", {"tea": True})
    item = await asyncio.to_thread(lg.get, ("users", "u1"), "prefs")
    return item.value if item else None


def _lg_astore(store: keepstate.Store) -> Any:
    from keepstate.integrations.langgraph import AsyncKeepstateStore

    return AsyncKeepstateStore.from_store(store)


async def _use_lg_astore(lg: Any) -> Any:
    await lg.aput(("users", "u1"), "prefs", {"tea": True})
    item = await lg.aget(("users", "u1"), "prefs")
    return item.value if item else None


def _openai(store: keepstate.Store) -> Any:
    from keepstate.integrations.openai_agents import KeepstateSession

    return KeepstateSession.from_store(f"ses_{uuid.uuid4().hex[:8]}", store)


async def _use_openai(session: Any) -> Any:
    await session.add_items([{"role": "user", "content": "hi"}])
    return await session.get_items()


def _adk(store: keepstate.Store) -> Any:
    from keepstate.integrations.adk import KeepstateSessionService

    return KeepstateSessionService.from_store(store)


async def _use_adk(service: Any) -> Any:
    session = await service.create_session(app_name="app", user_id="u1", state={"n": 1})
    found = await service.get_session(app_name="app", user_id="u1", session_id=session.id)
    return found.state if found else None


ADAPTERS: dict[str, tuple[Callable[[keepstate.Store], Any], Use]] = {
    "langgraph-saver": (_saver, _use_saver),
    "langgraph-store": (_lg_store, _use_lg_store),
    "langgraph-async-store": (_lg_astore, _use_lg_astore),
    "openai-session": (_openai, _use_openai),
    "adk-service": (_adk, _use_adk),
}


def _each_adapter_and_store() -> list[Any]:
    return [
        pytest.param(adapter, backend, id=f"{adapter}-{backend}")
        for adapter in ADAPTERS
        for backend in declaring()
        if not (adapter == "adk-service" and backend in NO_ADK)
    ]


each_adapter = pytest.mark.parametrize(("adapter", "backend_url"), _each_adapter_and_store(), indirect=["backend_url"])


async def _close(adapter: Any) -> None:
    closing = getattr(adapter, "aclose", None) or adapter.close
    result = closing()
    if asyncio.iscoroutine(result):
        await result


@each_adapter
async def test_an_adapter_of_a_store_opened_in_passing_keeps_working(backend_url: str, adapter: str) -> None:
    make, use = ADAPTERS[adapter]
    made = make(keepstate.open(backend_url))
    gc.collect()
    first = await use(made)
    gc.collect()
    assert await use(made) is not None and first is not None
    await _close(made)


@each_adapter
async def test_an_adapter_used_after_close_says_so_and_leaves_a_shared_store_open(
    backend_url: str, adapter: str
) -> None:
    make, use = ADAPTERS[adapter]
    store = keepstate.open(backend_url)
    try:
        made = make(store)
        await use(made)
        await _close(made)
        await _close(made)  # again: a no-op
        with pytest.raises(keepstate.StoreClosed):
            await use(made)
        scope = store.scope("agent", agent="still-open")
        scope.put("k", 1)
        assert scope.get("k") == 1
    finally:
        await store.aclose()
        store.close()
