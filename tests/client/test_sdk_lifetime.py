"""The SDK's clients held the way users hold them, against a real server: an ``AsyncClient`` under a
new event loop per call (as sync wrappers run it), one ``Client`` from many threads, and both used
after ``close()``/``aclose()`` (``StoreClosed``, never httpx's or a loop's RuntimeError)."""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid

import pytest
from sdk_helpers import Keys

import keepstate
from serverproc import ServerInfo


def test_an_async_client_works_under_a_new_event_loop_per_call(sdk_server: ServerInfo, keys: Keys) -> None:
    client = keepstate.AsyncClient(sdk_server.url, key=keys.member)
    made = [asyncio.run(client.sessions.create(id=f"loop-{uuid.uuid4().hex[:8]}")).id for _ in range(3)]
    gc.collect()
    for session_id in made:
        assert asyncio.run(client.sessions.get(session_id)).id == session_id
    asyncio.run(client.aclose())
    with pytest.raises(keepstate.StoreClosed):
        asyncio.run(client.sessions.get(made[0]))
    asyncio.run(client.aclose())  # again: a no-op


async def test_an_async_client_used_after_aclose_says_so(sdk_server: ServerInfo, keys: Keys) -> None:
    async with keepstate.AsyncClient(sdk_server.url, key=keys.member) as client:
        session = await client.sessions.create()
    with pytest.raises(keepstate.StoreClosed):
        await client.sessions.get(session.id)


def test_a_client_used_after_close_says_so(sdk_server: ServerInfo, keys: Keys) -> None:
    with keepstate.Client(sdk_server.url, key=keys.member) as client:
        session = client.sessions.create()
    with pytest.raises(keepstate.StoreClosed):
        client.sessions.get(session.id)
    client.close()  # again: a no-op


def test_one_client_from_many_threads_loses_nothing(sdk_server: ServerInfo, keys: Keys) -> None:
    threads, each = 8, 5
    start = threading.Barrier(threads)
    made: list[str] = []
    errors: list[BaseException] = []
    with keepstate.Client(sdk_server.url, key=keys.member) as client:

        def work() -> None:
            try:
                start.wait()
                for _ in range(each):
                    made.append(client.sessions.create().id)
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)

        running = [threading.Thread(target=work) for _ in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
        assert errors == []
        assert len(set(made)) == threads * each
        assert all(client.sessions.get(session_id).id == session_id for session_id in made)
