"""One kind of work cannot starve another: searches that cannot go on hold up no write, read or listing.

Made by construction, never by timing: every thread that runs SQLite searches is held on an Event,
searches are queued behind them, and then another agent's 100 KB write (its body parsed off the loop),
a state read and a memory listing must all be answered while those searches still wait. On PostgreSQL,
searches are limited per process (``SEARCHES_AT_ONCE``): with every search slot held, the same calls
are answered. Each answer is awaited with a long timeout that only catches a hang.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from backends import declaring
from keepstate import offload
from keepstate.server.app import create_app

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform", "documents", "shared"), indirect=True)

ROOT = "ks_root_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
ADMIN = {"Authorization": f"Bearer {ROOT}"}
HANG_S = 60.0
SEARCHES = 8


@pytest.fixture
async def client(backend_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    app = create_app(backend_url, bootstrap_admin=True, admin_key=ROOT)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=ADMIN, timeout=HANG_S) as c:
            yield c, app


class Held:
    """Every way a search of this store can run, held until ``release()``: each SQLite search thread
    blocked on an Event, or every search slot of the PostgreSQL facet taken."""

    def __init__(self, app: Any) -> None:
        self.go = threading.Event()
        self._slots: asyncio.Semaphore | None = getattr(app.state.memory_api.facet, "_searching", None)
        self._taken = 0

    async def hold(self) -> None:
        if self._slots is not None:
            from keepstate.stores.postgres.documents import SEARCHES_AT_ONCE

            for _ in range(SEARCHES_AT_ONCE):
                await self._slots.acquire()
                self._taken += 1
            return
        started = threading.Barrier(offload.POOL_SIZES["search"] + 1)
        for _ in range(offload.POOL_SIZES["search"]):
            offload.pool("search").submit(lambda: (started.wait(HANG_S), self.go.wait(HANG_S)))
        await asyncio.to_thread(started.wait, HANG_S)  # every search thread is now held

    def release(self) -> None:
        self.go.set()
        for _ in range(self._taken):
            assert self._slots is not None
            self._slots.release()


async def test_searches_that_cannot_run_hold_up_no_write_read_or_listing(
    client: tuple[httpx.AsyncClient, Any],
) -> None:
    http, app = client
    for n in range(5):
        written = await http.put(f"/v0/agents/kb/memory/notes/{n}", json={"text": f"Note {n}\nparcel late {n}"})
        assert written.status_code == 200, written.text
    held = Held(app)
    await held.hold()
    try:
        searches = [
            asyncio.create_task(http.post("/v0/agents/kb/memory/search", json={"query": "late parcel"}))
            for _ in range(SEARCHES)
        ]
        big = {"value": "x" * 100_000}
        put = await asyncio.wait_for(http.put("/v0/agents/other/state/big", json=big), HANG_S)
        assert put.status_code == 200, put.text
        got = await asyncio.wait_for(http.get("/v0/agents/other/state/big"), HANG_S)
        assert got.status_code == 200 and got.json()["value"] == big["value"]
        listed = await asyncio.wait_for(http.get("/v0/agents/kb/memory"), HANG_S)
        assert listed.status_code == 200 and len(listed.json()["documents"]) == 5
        assert not any(search.done() for search in searches)  # they really were held all along
    finally:
        held.release()
    answers = await asyncio.wait_for(asyncio.gather(*searches), HANG_S)
    assert all(answer.status_code == 200 and len(answer.json()["hits"]) == 5 for answer in answers)
