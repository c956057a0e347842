"""``inv.memory`` end to end: sync and async workers against a real ``keepstate serve``, and ``run_agent``.

The agent keeps a customer's facts in ``users/{user}/`` and reads shared knowledge; two customers'
runs of the same agent never see each other's facts, whichever SDK face wrote them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sdk_helpers import Keys

import keepstate
from keepstate.client import AsyncClient, AsyncInvocation, AsyncWorker, Client, Invocation, Worker
from keepstate.memory import Document, DocumentInfo, Hit
from keepstate.testing import arun_agent, run_agent
from serverproc import ServerInfo


def remember(inv: Invocation) -> Any:
    """Files the customer's message as a fact, then answers with what it knows."""
    memory = inv.memory
    if inv.input.get("shared"):
        memory.write("kb/returns", "Returns policy\nItems may be returned within 30 days.", {"source": "faq"})
    memory.write(f"users/{{user}}/fact-{inv.input['n']}", inv.input["fact"])
    found = memory.read(f"users/{{user}}/fact-{inv.input['n']}")
    assert isinstance(found, Document)
    stale = None
    try:
        memory.write(found.path, "overwrite", if_version=found.version - 1 if found.version > 1 else 0)
    except keepstate.VersionConflict as conflict:
        stale = conflict.current_version
    return {
        "path": found.path,
        "version": found.version,
        "stale": stale,
        "mine": [info.path for info in memory.list("users/{user}/")],
        "all": [info.path for info in memory.list()],
        "hits": [hit.path for hit in memory.search(inv.input["query"])],
        "returns": [[hit.path, "**" in hit.snippet] for hit in memory.search("returned", prefix="kb/")],
        "absent": memory.read("kb/nothing"),
    }


def serve(server: ServerInfo, keys: Keys, agent: str, fn: Callable[[Invocation], Any], background: Any) -> None:
    """A worker serving ``fn`` as ``agent`` in the background, until the test ends."""
    worker = Worker(server.url, key=keys.worker, claim_wait=1)
    worker.agent(agent)(fn)
    background(worker)


def run_and_wait(client: Client, agent: str, user: str | None, payload: dict[str, Any]) -> Any:
    session = client.sessions.create(user=user) if user else client.sessions.create()
    run = client.runs.start(agent, payload, session_id=session.id)
    finished = client.runs.wait(run.id, timeout=30)
    assert finished.status == "done", finished.error
    return finished.output


def test_a_sync_agent_keeps_each_customers_facts_apart(
    sdk_server: ServerInfo, keys: Keys, agent_name: str, background: Callable[[Worker], Any]
) -> None:
    serve(sdk_server, keys, agent_name, remember, background)
    with Client(sdk_server.url, key=keys.member) as client:
        first = run_and_wait(
            client, agent_name, "ann", {"n": 1, "fact": "Ann prefers email", "query": "email", "shared": True}
        )
        second = run_and_wait(
            client, agent_name, "ben", {"n": 1, "fact": "Ben prefers phone calls", "query": "prefers"}
        )
        anonymous_session = client.sessions.create()
        failing = client.runs.start(agent_name, {"n": 1, "fact": "x", "query": "x"}, session_id=anonymous_session.id)
        failed = client.runs.wait(failing.id, timeout=30)
    assert first["path"] == "users/ann/fact-1" and first["version"] == 1 and first["stale"] == 1
    assert first["mine"] == ["users/ann/fact-1"]
    assert first["hits"] == ["users/ann/fact-1"]
    assert first["returns"] == [["kb/returns", True]]
    assert first["absent"] is None
    assert second["mine"] == ["users/ben/fact-1"]
    assert second["all"] == ["kb/returns", "users/ben/fact-1"]
    assert second["hits"] == ["users/ben/fact-1"]  # "Ann prefers email" is not Ben's
    assert failed.status == "failed" and failed.error["type"] == "NoUser", failed.error


def test_an_async_agent_has_the_same_memory(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    async def scenario() -> tuple[Any, Any]:
        worker = AsyncWorker(sdk_server.url, key=keys.worker, claim_wait=1)

        @worker.agent(agent_name)
        async def amemory(inv: AsyncInvocation) -> Any:
            version = await inv.memory.write("users/{user}/note", inv.input, {"n": 1})
            found = await inv.memory.read("users/{user}/note")
            listed = [info async for info in inv.memory.list()]
            hits = await inv.memory.search(inv.input.split()[0], limit=5)
            await inv.memory.delete("users/{user}/note", if_version=version)
            return {
                "found": found.text if found else None,
                "meta": found.metadata if found else None,
                "listed": [info.path for info in listed],
                "hits": [hit.path for hit in hits],
                "gone": await inv.memory.read("users/{user}/note"),
            }

        task = asyncio.create_task(worker.run())
        try:
            async with AsyncClient(sdk_server.url, key=keys.member) as client:
                outputs = []
                for user, text in (("cleo", "Cleo collects stamps"), ("dan", "Dan collects coins")):
                    session = await client.sessions.create(user=user)
                    run = await client.runs.start(agent_name, text, session_id=session.id)
                    outputs.append((await client.runs.wait(run.id, timeout=30)).output)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)
        return outputs[0], outputs[1]

    cleo, dan = asyncio.run(scenario())
    assert cleo == {
        "found": "Cleo collects stamps",
        "meta": {"n": 1},
        "listed": ["users/cleo/note"],
        "hits": ["users/cleo/note"],
        "gone": None,
    }
    assert dan["listed"] == ["users/dan/note"] and dan["hits"] == ["users/dan/note"]


def test_paths_are_sent_as_written_and_refused_by_the_server(
    sdk_server: ServerInfo, keys: Keys, agent_name: str, background: Callable[[Worker], Any]
) -> None:
    """``..`` and ``.`` are sent encoded, so the server refuses them: the SDK never resolves them away."""

    def tricky(inv: Invocation) -> Any:
        inv.memory.write("kb/target", "shared")
        refused = []
        for path in ("kb/../kb/target", "kb/./target", "kb//target", "Users/x/y", "users/other/x", ""):
            try:
                inv.memory.write(path, "pwned")
            except keepstate.KeepstateError as error:
                refused.append(error.code)
        found = inv.memory.read("kb/target")
        return {"refused": refused, "text": found.text if found else None}

    serve(sdk_server, keys, agent_name, tricky, background)
    with Client(sdk_server.url, key=keys.member) as client:
        output = run_and_wait(client, agent_name, "eve", {})
    assert output == {"refused": ["invalid_request"] * 4 + ["not_found", "invalid_request"], "text": "shared"}


def answer_from_the_knowledge_base(inv: Invocation) -> Any:
    """What an agent finds of what a backend seeded: shared documents, and its user's own folder."""
    return {
        "hits": [hit.path for hit in inv.memory.search(inv.input["query"])],
        "mine": [info.path for info in inv.memory.list("users/{user}/")],
    }


def test_a_backend_seeds_an_agent_s_memory_with_the_client_and_its_runs_find_it(
    sdk_server: ServerInfo, keys: Keys, agent_name: str, background: Callable[[Worker], Any]
) -> None:
    """``client.memory`` (admins): the agent's whole memory, or one end user's view of it; a member is refused."""
    serve(sdk_server, keys, agent_name, answer_from_the_knowledge_base, background)
    with Client(sdk_server.url, key=sdk_server.admin_key) as admin:
        memory = admin.memory.agent(agent_name)
        version = memory.write("kb/returns", "Returns policy: parcels may be returned within 30 days.", {"src": "faq"})
        memory.write("users/ada/orders", "Ada ordered a parcel of tea.")
        as_bob = admin.memory.user("bob", agent_name)
        as_bob.write("users/bob/orders", "Bob ordered a parcel of coffee.")
        with pytest.raises(keepstate.KeepstateError):
            as_bob.write("users/ada/orders", "not Bob's folder")
        found = memory.read("kb/returns")
        assert found is not None and (found.version, found.metadata) == (version, {"src": "faq"})
        assert [info.path for info in memory.list()] == ["kb/returns", "users/ada/orders", "users/bob/orders"]
        assert [info.path for info in as_bob.list()] == ["kb/returns", "users/bob/orders"]
        assert sorted(hit.path for hit in as_bob.search("parcel")) == ["kb/returns", "users/bob/orders"]
        with Client(sdk_server.url, key=keys.member) as member:
            with pytest.raises(keepstate.Forbidden):
                member.memory.agent(agent_name).read("kb/returns")
            output = run_and_wait(member, agent_name, "ada", {"query": "parcel"})
        assert sorted(output["hits"]) == ["kb/returns", "users/ada/orders"] and output["mine"] == ["users/ada/orders"]
        memory.delete("users/ada/orders")
        assert memory.read("users/ada/orders") is None


def test_the_async_client_has_the_same_caller_memory(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    async def scenario() -> tuple[Any, ...]:
        async with AsyncClient(sdk_server.url, key=sdk_server.admin_key) as admin:
            memory = admin.memory.agent(agent_name)
            await memory.write("kb/hours", "Open from nine to five.")
            await admin.memory.user("cleo", agent_name).write("users/cleo/prefs", "Cleo prefers mornings.")
            listed = [info.path async for info in memory.list()]
            as_dan = admin.memory.user("dan", agent_name)
            hits = [[hit.path for hit in await as_dan.search(word)] for word in ("nine", "mornings")]
            found = await memory.read("users/cleo/prefs")
            async with AsyncClient(sdk_server.url, key=keys.member) as member:
                try:
                    await member.memory.user("cleo", agent_name).read("users/cleo/prefs")
                except keepstate.Forbidden as refused:
                    forbidden = refused.code
            return listed, hits, found.text if found else None, forbidden

    listed, hits, text, forbidden = asyncio.run(scenario())
    assert listed == ["kb/hours", "users/cleo/prefs"]
    assert hits == [["kb/hours"], []]  # Dan sees the shared document, never Cleo's folder
    assert (text, forbidden) == ("Cleo prefers mornings.", "forbidden")


def test_run_agent_gives_the_same_memory_embedded() -> None:
    with keepstate.open("memory://") as store:
        run_agent(
            remember, {"n": 1, "fact": "Fay likes jazz", "query": "jazz", "shared": True}, user="fay", store=store
        )
        out = run_agent(remember, {"n": 2, "fact": "Gus likes rock", "query": "likes"}, user="gus", store=store)
        assert out["mine"] == ["users/gus/fact-2"] and out["hits"] == ["users/gus/fact-2"]
        with pytest.raises(keepstate.NoUser):
            run_agent(remember, {"n": 3, "fact": "x", "query": "x"}, store=store)
        assert [info.path for info in store.memory("agent", user="fay").list()] == ["kb/returns", "users/fay/fact-1"]

        async def agent(inv: AsyncInvocation) -> list[Hit]:
            return await inv.memory.search("jazz")

        hits = asyncio.run(arun_agent(agent, user="fay", store=store))
        assert [hit.path for hit in hits] == ["users/fay/fact-1"]


def test_records_are_frozen() -> None:
    document = Document("a", "t", {}, 1, 2)
    with pytest.raises(AttributeError):
        document.text = "changed"  # type: ignore[misc]
    assert DocumentInfo.from_dict({"path": "a", "version": 1, "updated_at": 2}) == DocumentInfo("a", 1, 2)
