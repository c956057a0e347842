"""``client.sessions.fork`` on both faces, against a real server: the fork's record with its ``parent``,
the cut list, the refusal of a non-list, and ``parent`` read back by ``get`` and ``list``."""

from __future__ import annotations

import pytest
from sdk_helpers import Keys

import keepstate
from keepstate.client import AsyncClient, Client
from serverproc import ServerInfo


def test_fork_copies_cuts_and_shows_the_parent(sdk_server: ServerInfo, keys: Keys) -> None:
    with Client(sdk_server.url, key=keys.member) as client:
        source = client.sessions.create(user="fork-ada", metadata={"topic": "x"})
        assert source.parent is None
        history = client.state.session(source.id, "chat")
        history.append("messages", ["m0", "m1", "m2"])
        history.put("title", "hello")
        fork = client.sessions.fork(source.id, {"chat/messages": 1}, metadata={"edited": True})
        assert (fork.parent, fork.user, fork.metadata) == (source.id, "fork-ada", {"edited": True})
        assert client.sessions.get(fork.id) == fork
        assert [s.parent for s in client.sessions.list() if s.id in (source.id, fork.id)] == [None, source.id]
        copied = client.state.session(fork.id, "chat")
        assert copied.get("messages") == ["m0"] and copied.get("title") == "hello"
        assert history.get("messages") == ["m0", "m1", "m2"]
        again = client.sessions.fork(source.id, id=f"{source.id}-again", user="fork-ada")
        assert again.id == f"{source.id}-again" and client.sessions.fork(source.id, id=again.id) == again
        with pytest.raises(keepstate.NotAList):
            client.sessions.fork(source.id, {"chat/title": 0}, id=f"{source.id}-never")
        with pytest.raises(keepstate.NotFound):
            client.sessions.get(f"{source.id}-never")


async def test_fork_awaited(sdk_server: ServerInfo, keys: Keys) -> None:
    async with AsyncClient(sdk_server.url, key=keys.member) as client:
        source = await client.sessions.create()
        await client.state.session(source.id, "chat").append("messages", [1, 2, 3])
        fork = await client.sessions.fork(source.id, lists={"chat/messages": 2})
        assert fork.parent == source.id
        assert await client.state.session(fork.id, "chat").get("messages") == [1, 2]
        with pytest.raises(keepstate.NotFound):
            await client.sessions.fork("no-such-session")
