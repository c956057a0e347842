"""KeepstateSaver's storage: a turn writes what changed, a cold read rebuilds the whole thread, and
what LangGraph stores is readable in keepstate (the console's conversation, the registered session).

The graphs are real LangGraph graphs over MessagesState (conversations.CheckpointerConversation);
the store is a real SQLite file (PostgreSQL where said).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from conversations import CheckpointerConversation

import keepstate
from keepstate.integrations.langgraph import KeepstateSaver, blobs, keys
from keepstate.platform import open_platform
from keepstate.platform.models import Caller

ADMIN = Caller("default", "admin", "key_admin")


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def _messages_blob(saver: KeepstateSaver, thread_id: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    latest = saver.get_tuple(config)  # type: ignore[arg-type]
    assert latest is not None
    version = latest.checkpoint["channel_versions"]["messages"]
    record: dict[str, Any] = saver.store.scope("session", agent=keys.AGENT, id=thread_id).get(
        keys.blob("", "messages", version)
    )
    return record


def test_a_turn_stores_only_the_new_messages_and_a_cold_read_rebuilds_them(tmp_path: Path) -> None:
    turns = 2 * blobs.SNAPSHOT_EVERY + 5
    with KeepstateSaver(_url(tmp_path)) as saver:
        conversation = CheckpointerConversation(saver, "long")
        for turn in range(turns):
            conversation.append(f"m{turn}")
        record = _messages_blob(saver, "long")
        assert record["n"] == turns
        assert "base" in record and len(record["tail"]) <= 1, record.keys()
        assert 0 < blobs.depth(record) <= blobs.SNAPSHOT_EVERY
    with KeepstateSaver(_url(tmp_path)) as cold:  # nothing cached: the deltas are walked back to a snapshot
        assert CheckpointerConversation(cold, "long").texts() == [f"m{turn}" for turn in range(turns)]


def test_a_snapshot_larger_than_one_value_is_split_and_read_back(tmp_path: Path) -> None:
    big = ["x" * 300_000 + str(index) for index in range(4)]  # 1.2 MB of messages, over one value's 1 MiB
    with KeepstateSaver(_url(tmp_path)) as saver:
        conversation = CheckpointerConversation(saver, "big")
        for text in big:
            conversation.append(text)
        saver.prune(["big"])  # the latest's deltas rewritten as one snapshot, too large for one value
        scope = saver.store.scope("session", agent=keys.AGENT, id="big")
        assert any(".p" in key for key, _ in scope.keys(f"{keys.BLOB}.")), "no snapshot was split in parts"
    with KeepstateSaver(_url(tmp_path)) as cold:
        assert CheckpointerConversation(cold, "big").texts() == big


def test_the_thread_is_a_registered_session_holding_a_readable_conversation(tmp_path: Path) -> None:
    with KeepstateSaver(_url(tmp_path)) as saver:
        conversation = CheckpointerConversation(saver, "chat-1")
        conversation.append("hello")
        conversation.append("how are you?")
        readable = saver.store.scope("session", agent=keys.AGENT, id="chat-1").get(keys.MESSAGES)
        assert [(item["role"], item["content"]) for item in readable] == [("user", "hello"), ("user", "how are you?")]

        async def agents() -> list[str]:
            platform = await open_platform(saver.store.url)
            try:
                await platform.get_session(ADMIN, "chat-1")
                return list(await platform.session_agents(ADMIN, "chat-1"))
            finally:
                await platform.aclose()

        assert asyncio.run(agents()) == [keys.AGENT]


def test_plain_values_are_stored_as_readable_json(tmp_path: Path) -> None:
    with KeepstateSaver(_url(tmp_path)) as saver:
        config = {"configurable": {"thread_id": "plain", "checkpoint_ns": ""}}
        checkpoint = {
            "v": 1,
            "id": str(uuid.uuid4()),
            "ts": "2026-12-01T00:00:00+00:00",
            "channel_values": {"plan": {"steps": ["a", "b"]}},
            "channel_versions": {"plan": 1},
            "versions_seen": {},
            "updated_channels": None,
        }
        saver.put(config, checkpoint, {"source": "input", "step": -1}, {"plan": 1})  # type: ignore[arg-type]
        stored = saver.store.scope("session", agent=keys.AGENT, id="plain").get(keys.blob("", "plan", 1))
        assert stored == {"v": {"t": "msgpack", "j": {"steps": ["a", "b"]}}}


@pytest.mark.parametrize("thread_id", ["has space", "ünïcode/thread", "x" * 300, "x-looks-hashed", ""])
def test_any_thread_id_is_kept_apart_from_the_others(thread_id: str, tmp_path: Path) -> None:
    with KeepstateSaver(_url(tmp_path)) as saver:
        CheckpointerConversation(saver, thread_id).append("mine")
        CheckpointerConversation(saver, thread_id + "!").append("other")
        assert CheckpointerConversation(saver, thread_id).texts() == ["mine"]
        listed = {item.config["configurable"]["thread_id"] for item in saver.list(None)}
        assert listed == {thread_id, thread_id + "!"}


def test_from_store_shares_the_store_and_leaves_it_open(tmp_path: Path) -> None:
    store = keepstate.open(_url(tmp_path))
    try:
        saver = KeepstateSaver.from_store(store)
        CheckpointerConversation(saver, "shared").append("hi")
        saver.close()
        assert store.scope("session", agent=keys.AGENT, id="shared").get(keys.MESSAGES)[0]["content"] == "hi"
    finally:
        store.close()


def test_the_async_face_runs_a_graph_on_postgres(pg_url: str) -> None:
    from langchain_core.messages import HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    async def run() -> list[str]:
        async with KeepstateSaver(pg_url) as saver:
            builder = StateGraph(MessagesState)
            builder.add_node("agent", lambda state: {"messages": []})
            builder.add_edge(START, "agent")
            builder.add_edge("agent", END)
            graph = builder.compile(checkpointer=saver)
            config = {"configurable": {"thread_id": "async"}}
            for text in ("a", "b", "c"):
                await graph.ainvoke({"messages": [HumanMessage(text)]}, config)  # type: ignore[arg-type]
            state = await graph.aget_state(config)  # type: ignore[arg-type]
            return [message.content for message in state.values["messages"]]

    assert asyncio.run(run()) == ["a", "b", "c"]


def test_importing_keepstate_imports_no_framework() -> None:
    code = "import keepstate, sys; assert not [m for m in sys.modules if m.startswith('langgraph')]"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_readable_copy_keeps_its_recent_part_when_it_reaches_one_value(tmp_path: Path) -> None:
    from keepstate.integrations.langgraph import readable

    turns = 1024 * 1024 // readable.MAX_CONTENT + 20  # past 1 MiB of readable items
    with KeepstateSaver(_url(tmp_path)) as saver:
        conversation = CheckpointerConversation(saver, "long-texts")
        for turn in range(turns):
            conversation.append(f"{turn}:" + "y" * readable.MAX_CONTENT)
        copy = saver.store.scope("session", agent=keys.AGENT, id="long-texts").get(keys.MESSAGES)
        assert readable.KEEP_ON_FULL <= len(copy) < turns
        assert copy[-1]["content"].startswith(f"{turns - 1}:")
        assert len(conversation.texts()) == turns  # the checkpoints keep every message whole
