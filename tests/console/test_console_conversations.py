"""Framework adapters' conversations without a browser: items of shapes nobody expected still give a
page (never a 500) and show as text, the layouts the console recognises are the adapters' own names,
pages of a conversation are read across its lists, and the readers never raise on any JSON.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from console_support import in_process, sign_in
from hypothesis import given, settings
from hypothesis import strategies as st
from test_console_adapters import openai_session

import keepstate
from keepstate.server.console import conversations, state_pages, views


async def test_unexpected_items_in_adapter_scopes_still_give_a_page(tmp_path: Path) -> None:
    """Values nobody's adapter writes, under the adapters' names: the page shows them as JSON, never a 500."""
    url = f"sqlite:///{tmp_path / 'odd.db'}"
    with keepstate.open(url) as store:
        for agent in ("langgraph", "openai-agents", "helpdesk"):
            store.register_session("odd", agent)
        lg = store.scope("session", agent="langgraph", id="odd")
        lg.put("messages", {"not": "a list"})
        lg.put("cp.x-1.x-2", {"v": {"t": "msgpack", "b": "gqF4AQ=="}})
        oa = store.scope("session", agent="openai-agents", id="odd")
        oa.put("history", "three")
        oa.append(
            "items", [7, None, ["a"], {"role": 5}, {"type": "function_call"}, {"type": "reasoning", "summary": 3}]
        )
        adk = store.scope("session", agent="helpdesk", id="odd")
        adk.put("u.session", [1, 2])
        adk.append("u.events", [{"role": "desk", "content": None, "event": {"content": {"parts": [5, {"x": 1}]}}}])
        adk.put("u.events.2", "not a list")
    async with in_process(url) as (client, platform):
        admin = (await platform.create_key("default", "admin", "odd admin"))[1]
        await sign_in(client, admin)
        page = await client.get("/console/sessions/odd")
        assert page.status_code == 200
        assert page.text.count('<li class="message"') == 6 + 1
        assert "&#34;not&#34;: &#34;a list&#34;" not in page.text  # not a conversation: shown in the raw view
        raw = await client.get("/console/sessions/odd", params={"agent": "langgraph", "raw": "1"})
        assert raw.status_code == 200 and "cp.x-1.x-2" in raw.text and "a list" in raw.text


def test_the_layouts_are_the_adapters_own() -> None:
    from keepstate.integrations import openai_agents
    from keepstate.integrations.adk import layout
    from keepstate.integrations.langgraph import keys

    assert (conversations.LANGGRAPH_AGENT, conversations.LANGGRAPH_MESSAGES) == (keys.AGENT, keys.MESSAGES)
    written = [keys.head("n"), keys.checkpoint("n", "c"), keys.blob("n", "ch", 1), keys.writes("n", "c")]
    assert all(key.startswith(conversations.LANGGRAPH_BOOKKEEPING) for key in written)
    assert (conversations.OPENAI_AGENT, conversations.OPENAI_ITEMS) == (openai_agents.AGENT, openai_agents.KEY)
    parts = conversations.openai_parts(2)
    assert parts == (openai_agents.part_key(1), openai_agents.part_key(2), openai_agents.KEY)
    assert openai_agents.PARTS == conversations.OPENAI_PARTS
    names = [layout.record_key("ada"), layout.events_key("ada", 0), layout.events_key("ada", 1)]
    assert conversations.adk_users(names) == ["ada"]
    chunks = [layout.events_key("ada", n) for n in (10, 2, 0, 1)]
    assert conversations.adk_parts("ada", chunks) == tuple(layout.events_key("ada", n) for n in (0, 1, 2, 10))


def test_recognise_only_what_an_adapter_wrote() -> None:
    assert conversations.recognise("chat", ["history", "profile"]) is None
    assert conversations.recognise("chat", ["notes.session"]) is None  # a record without events: not ADK
    found = conversations.recognise("helpdesk", ["ada.events", "ada.session", "bob.events", "bob.session"])
    assert found is not None and [one.user for one in found.conversations] == ["ada", "bob"]
    assert conversations.openai_parts(True) == conversations.openai_parts(-1) == ("items",)


def test_spans_read_a_page_across_lists() -> None:
    lengths = [3, 0, 4, 2]
    keys = ["a", "b", "c", "d"]
    assert views.spans(keys, lengths, 0, 9) == [("a", 0, 3), ("c", 0, 4), ("d", 0, 2)]
    assert views.spans(keys, lengths, 2, 3) == [("a", 2, 1), ("c", 0, 2)]
    assert views.spans(keys, lengths, 7, 5) == [("d", 0, 2)]
    assert views.spans(keys, lengths, 9, 5) == []


FIELDS = ["role", "content", "type", "text", "name", "arguments", "output", "summary", "event", "parts"]
FIELDS += ["function_call", "function_response", "args", "response", "refusal"]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
JSON = st.recursive(  # what a store can hold: integers in signed 64 bits
    SCALARS | st.sampled_from(["function_call", "function_call_output", "reasoning", "user"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_readers_never_raise_on_any_json(item: Any) -> None:
    for read in (conversations.chat_message, conversations.openai_item, conversations.adk_event):
        said = read(item)
        assert isinstance(said.text, str) and said.side in conversations.SIDES


async def test_markup_in_a_conversation_is_text(tmp_path: Path) -> None:
    """An adapter's message holding markup shows as those characters."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    await openai_session(url, "xss", [{"role": "user", "content": "<img src=x onerror=alert(1)>"}])
    async with in_process(url) as (client, platform):
        admin = (await platform.create_key("default", "admin", None))[1]
        await sign_in(client, admin)
        text = (await client.get("/console/sessions/xss")).text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text and "<img src=x" not in text


async def test_an_openai_session_past_one_mebibyte_pages_across_its_parts(tmp_path: Path) -> None:
    """Past 1 MiB the adapter archives its items as ``history.0001``…; the page reads across them, in order."""
    url = f"sqlite:///{tmp_path / 'long.db'}"
    said = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n} " + "x" * 20_000} for n in range(60)
    ]
    for start in range(0, 60, 10):  # turn by turn, as a Runner adds them
        await openai_session(url, "long", said[start : start + 10])
    with keepstate.open(url) as store:
        assert store.scope("session", agent="openai-agents", id="long").get("history", 0) >= 1  # archived
    async with in_process(url) as (client, platform):
        await sign_in(client, (await platform.create_key("default", "admin", None))[1])
        page = (await client.get("/console/sessions/long")).text
        shown = re.findall(r"message (\d+) x", page)
        assert shown == [str(n) for n in range(60 - state_pages.LIST_ITEMS, 60)]
        earlier = re.search(r'<a href="\?([^"]+)">Earlier messages</a>', page)
        assert earlier is not None and "showing 11–60 of 60" in page
        before = (await client.get(f"/console/sessions/long?{html.unescape(earlier.group(1))}")).text
        assert re.findall(r"message (\d+) x", before) == [str(n) for n in range(60 - state_pages.LIST_ITEMS)]
