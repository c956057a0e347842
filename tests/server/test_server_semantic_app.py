"""The app in process (httpx.ASGITransport) with an embedder, on every backend with memory: writes,
the three modes, and the background retry embedding what a failing embedder left behind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

import meaning
from backends import declaring
from keepstate.server.app import create_app

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform", "documents"), indirect=True)
ADMIN = {"Authorization": "Bearer root-key-for-the-semantic-app-tests"}
PREFIX = "/v0/agents/travel/memory"


async def test_the_app_embeds_searches_and_retries(
    backend_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = tmp_path / "down"
    monkeypatch.setenv("KEEPSTATE_TEST_EMBEDDER_DOWN", str(down))
    monkeypatch.setenv("KEEPSTATE_EMBED_RETRY", "0.05")
    app = create_app(backend_url, bootstrap_admin=True, admin_key=ADMIN["Authorization"][7:], embedder="meaning:flaky")
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client,
    ):

        async def search(**body: object) -> httpx.Response:
            return await client.post(f"{PREFIX}/search", json=body, headers=ADMIN)

        written = await client.put(f"{PREFIX}/kb/meals", json={"text": "Vegetarian meals."}, headers=ADMIN)
        assert written.json() == {"version": 1}
        down.touch()
        kept = await client.put(f"{PREFIX}/kb/trip", json={"text": "The trip was called off."}, headers=ADMIN)
        assert kept.json() == {"version": 1}
        assert [h["path"] for h in (await search(query="trip", mode="text")).json()["hits"]] == ["kb/trip"]
        assert (await search(query="flight cancelled", mode="semantic")).json()["error"] == "unavailable"
        facet = app.state.memory_api.facet
        assert await facet.embedding_counts(f"meaning:flaky#{meaning.DIMS}", "default/travel") == (1, 2)
        down.unlink()
        deadline = time.monotonic() + 60
        while len((await search(query="flight cancelled", mode="semantic")).json()["hits"]) < 2:
            assert time.monotonic() < deadline, "the background retry never embedded the document"
            await asyncio.sleep(0.05)
        for mode in ("semantic", "hybrid", None):
            answer = await search(query="flight cancelled", **({} if mode is None else {"mode": mode}))
            assert answer.json()["hits"][0]["path"] == "kb/trip", answer.text
