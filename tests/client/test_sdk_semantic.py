"""``inv.memory.search(query, mode=, filter=)`` from sync and async workers against ``keepstate serve
--embedder``, and the same on the embedded store (``run_agent`` over ``keepstate.open(url, embedder=...)``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sdk_helpers import Keys, make_key

import keepstate
import meaning
from keepstate.client import AsyncClient, AsyncInvocation, AsyncWorker, Client, Invocation, Worker
from keepstate.testing import run_agent
from serverproc import ServerInfo, running_server

TESTS = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def meaning_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    path = tmp_path_factory.mktemp("sdk-meaning") / "server.db"
    env = {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    with running_server(f"sqlite:///{path}", extra_env=env, extra_args=("--embedder", "meaning:concepts")) as info:
        yield info


@pytest.fixture
def meaning_keys(meaning_server: ServerInfo) -> Keys:
    return Keys(member=make_key(meaning_server, "member"), worker=make_key(meaning_server, "worker"))


def travel(inv: Invocation) -> Any:
    """Keeps a note in the customer's folder, then looks for it by meaning, by words and by both."""
    memory = inv.memory
    memory.write("users/{user}/trip", inv.input, {"kind": "trip"})
    memory.write("kb/meals", "Vegetarian meals on request.", {"kind": "menu"})
    return {
        mode: [hit.path for hit in memory.search("flight cancelled", mode=mode)]
        for mode in ("semantic", "hybrid", "text")
    } | {"filtered": [hit.path for hit in memory.search("flight", mode="semantic", filter={"kind": "menu"})]}


def test_a_sync_worker_searches_by_meaning(
    meaning_server: ServerInfo, meaning_keys: Keys, agent_name: str, background: Callable[[Worker], Any]
) -> None:
    worker = Worker(meaning_server.url, key=meaning_keys.worker, claim_wait=1)
    worker.agent(agent_name)(travel)
    background(worker)
    with Client(meaning_server.url, key=meaning_keys.member) as client:
        outputs = {}
        for user, note in (("ann", "Ann's trip was called off."), ("ben", "Ben's journey was scrapped.")):
            session = client.sessions.create(user=user)
            run = client.runs.start(agent_name, note, session_id=session.id)
            finished = client.runs.wait(run.id, timeout=30)
            assert finished.status == "done", finished.error
            outputs[user] = finished.output
    assert outputs["ann"]["semantic"] == ["users/ann/trip", "kb/meals"]
    assert outputs["ann"]["hybrid"][0] == "users/ann/trip" and outputs["ann"]["text"] == []
    assert outputs["ben"]["semantic"] == ["users/ben/trip", "kb/meals"]  # never ann's note
    assert outputs["ann"]["filtered"] == ["kb/meals"]


def test_an_async_worker_searches_by_meaning(meaning_server: ServerInfo, meaning_keys: Keys, agent_name: str) -> None:
    async def scenario() -> Any:
        worker = AsyncWorker(meaning_server.url, key=meaning_keys.worker, claim_wait=1)

        @worker.agent(agent_name)
        async def atravel(inv: AsyncInvocation) -> Any:
            await inv.memory.write("notes/trip", inv.input)
            hits = await inv.memory.search("flight cancelled", mode="semantic", limit=1)
            return [(hit.path, hit.snippet, hit.score > 0.5) for hit in hits]

        task = asyncio.create_task(worker.run())
        try:
            async with AsyncClient(meaning_server.url, key=meaning_keys.member) as client:
                run = await client.runs.start(agent_name, "The trip was called off.")
                return (await client.runs.wait(run.id, timeout=30)).output
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)

    assert asyncio.run(scenario()) == [["notes/trip", "The trip was called off.", True]]


def test_run_agent_searches_by_meaning_on_an_embedded_store() -> None:
    with keepstate.open("memory://", embedder=meaning.concepts) as store:
        note = "Cleo's trip was called off."
        out = run_agent(travel, note, user="cleo", store=store)
        assert out["semantic"] == ["users/cleo/trip", "kb/meals"] and out["text"] == []
    with keepstate.open("memory://") as plain, pytest.raises(keepstate.NoEmbedder):
        run_agent(travel, "x", user="dan", store=plain)
