"""The SDK's lifecycle calls, both faces, against a real server: ``sessions.update``, ``agents.list``
and ``runs.start(queue_timeout=)``, with the errors the HTTP API gives as the SDK's exceptions."""

from __future__ import annotations

import pytest
from sdk_helpers import Keys

import keepstate
from keepstate.client import Agent, AsyncClient, Client
from serverproc import ServerInfo


def test_sync_update_agents_and_a_run_that_expires(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    with Client(sdk_server.url, key=keys.member) as client:
        session = client.sessions.create(metadata={"title": "draft"})
        updated = client.sessions.update(session.id, metadata={"title": "final", "tags": ["a"]})
        assert updated.metadata == {"title": "final", "tags": ["a"]} and updated.id == session.id
        assert client.sessions.get(session.id).metadata == updated.metadata
        with pytest.raises(keepstate.InvalidRequest):
            client.sessions.update(session.id, metadata=["not", "an", "object"])
        with pytest.raises(keepstate.NotFound):
            client.sessions.update("no-such-session", metadata={})
        run = client.runs.start(agent_name, {"q": 1}, session_id=session.id, queue_timeout=1)
        assert run.queue_deadline is not None and run.created_at is not None
        assert run.queue_deadline - run.created_at == 1000
        with pytest.raises(keepstate.SessionBusy):
            client.runs.start(agent_name, session_id=session.id)
        ended = client.runs.wait(run.id, timeout=60)  # returns once it expired; 60 s only bounds a hang
        assert ended.status == "expired" and ended.finished
        with pytest.raises(keepstate.InvalidRequest):
            client.runs.start(agent_name, queue_timeout=0)
        assert client.runs.start(agent_name, session_id=session.id).status == "queued"
        agents = {agent.name: agent for agent in client.agents.list()}
        assert agents[agent_name] == Agent(agent_name, None, 1, 0, 0)


async def test_async_update_agents_and_queue_timeout(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    async with AsyncClient(sdk_server.url, key=keys.member) as client:
        session = await client.sessions.create()
        updated = await client.sessions.update(session.id, metadata={"n": 2})
        assert updated.metadata == {"n": 2}
        run = await client.runs.start(agent_name, queue_timeout=30)
        assert run.queue_deadline is not None and run.created_at is not None
        assert run.queue_deadline - run.created_at == 30_000
        assert [agent.queued for agent in await client.agents.list() if agent.name == agent_name] == [1]
    async with AsyncClient(sdk_server.url, key=keys.worker) as worker:
        with pytest.raises(keepstate.Forbidden):
            await worker.agents.list()
