"""A store outage is an operational failure: Unavailable, quickly, and never a replayed effect."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sessions_support import Proxy, target_of, with_port

from backends import NETWORK, SERVED
from keepstate import Unavailable
from keepstate.sessions import InterruptedExecution, SessionManager, open_session_store
from serverproc import closed_port


@pytest.mark.parametrize("backend_url", NETWORK + SERVED, indirect=True)
async def test_unreachable_store_raises_unavailable_without_running_anything(backend_url: str) -> None:
    with closed_port() as port:
        await _nothing_runs_where_nothing_answers(with_port(backend_url, port))


async def _nothing_runs_where_nothing_answers(url: str) -> None:
    store = open_session_store(url, wait_timeout=30)
    ran = []

    async def effect_body() -> None:
        ran.append("effect")

    calls: list[Callable[[], Awaitable[object]]] = [lambda: store.get("s"), lambda: store.transact("s", effect_body)]
    for call in calls:
        with pytest.raises(Unavailable):
            await asyncio.wait_for(call(), timeout=15)  # an error, never a hang
    with pytest.raises(Unavailable):
        async with SessionManager(store, "cfg").open("s") as session, session.effect("book", {}):
            ran.append("effect")
    assert ran == []
    await store.aclose()


@pytest.mark.parametrize("backend_url", NETWORK + SERVED, indirect=True)
async def test_outage_inside_an_effect_leaves_it_interrupted_not_replayed(
    backend_url: str, proxies: list[Proxy]
) -> None:
    proxy = Proxy(*target_of(backend_url))
    await proxy.start()
    proxies.append(proxy)
    flaky = open_session_store(with_port(backend_url, proxy.port), lease_seconds=1, wait_timeout=5)
    effects = []
    with pytest.raises(Unavailable):
        async with SessionManager(flaky, "cfg").open("s") as session, session.effect("book", {"seat": "A1"}):
            effects.append("booked")  # the business effect happened...
            await proxy.cut()  # ...and then the store went away before its outcome was saved
    await flaky.aclose()

    store = open_session_store(backend_url, lease_seconds=1, wait_timeout=10)
    with pytest.raises(InterruptedExecution) as caught:
        async with SessionManager(store, "cfg").open("s"):
            effects.append("replayed")
    assert caught.value.effect["request"] == {"seat": "A1"}
    assert effects == ["booked"]
    await store.aclose()


def test_sqlite_file_that_cannot_be_opened_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(Unavailable):
        open_session_store(f"sqlite:///{tmp_path}/missing-dir/s.db")
