"""What framework adapters write, read in the console as conversations: real LangGraph graphs through
``KeepstateSaver``, real OpenAI Agents ``KeepstateSession`` items and real ADK sessions through
``KeepstateSessionService``, on a SQLite file that a real ``keepstate serve`` then serves; an admin
reads them in headless Chromium, the adapters' bookkeeping keys folded until asked for
(``test_console_conversations.py`` covers the rest without a browser).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Page, expect
from test_console_browser import shoot, signed_in

from keepstate.server.console import state_pages
from serverproc import running_server

TURNS = 30


def langgraph_thread(url: str, thread_id: str, turns: int) -> None:
    """``turns`` turns of an echo graph over ``MessagesState``, checkpointed by ``KeepstateSaver``."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    from keepstate.integrations.langgraph import KeepstateSaver

    def echo(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("echo", echo)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    with KeepstateSaver(url) as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(turns):
            graph.invoke(
                {"messages": [HumanMessage(content=f"turn {turn}")]}, {"configurable": {"thread_id": thread_id}}
            )


OPENAI_ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is parcel 1042?"},
    {"type": "function_call", "call_id": "c1", "name": "track", "arguments": '{"parcel": 1042}'},
    {"type": "function_call_output", "call_id": "c1", "output": "left the depot at 09:12"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It left the depot this morning.", "annotations": []}],
    },
]


async def openai_session(url: str, session_id: str, items: list[dict[str, Any]]) -> None:
    from keepstate.integrations.openai_agents import KeepstateSession

    session = KeepstateSession(session_id, url)
    try:
        await session.add_items(items)  # type: ignore[arg-type]
    finally:
        session.close()


async def adk_session(url: str, session_id: str) -> None:
    """An ADK session of app ``helpdesk`` and user ``ada``: a question, a tool call and its answer, a reply."""
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    from keepstate.integrations.adk import KeepstateSessionService

    def event(author: str, part: types.Part, **extra: Any) -> Event:
        role = "user" if author == "user" else "model"
        return Event(invocation_id="inv-1", author=author, content=types.Content(role=role, parts=[part]), **extra)

    service = KeepstateSessionService(url)
    try:
        session = await service.create_session(
            app_name="helpdesk", user_id="ada", session_id=session_id, state={"topic": "parcel"}
        )
        call = types.FunctionCall(name="track", args={"parcel": 1042})
        answer = types.FunctionResponse(name="track", response={"where": "depot"})
        for one in (
            event("user", types.Part(text="Where is parcel 1042?")),
            event("desk_agent", types.Part(function_call=call)),
            event("desk_agent", types.Part(function_response=answer)),
            event("desk_agent", types.Part(text="It is at the depot."), actions=EventActions(state_delta={"step": 2})),
        ):
            await service.append_event(session, one)
    finally:
        await service.close()


def on_own_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run an adapter's coroutine on a loop of its own thread: sync Playwright drives this thread's."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coroutine).result()


def messages_of(page: Page) -> Any:
    return page.locator("section.adapter-conversation li.message")


def test_a_langgraph_thread_reads_as_a_chat_with_its_checkpoints_folded(
    browser: Browser, tmp_path: Path, screenshot_dir: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    langgraph_thread(url, "thread-20", TURNS)
    with running_server(url) as server:
        page = signed_in(browser, server, server.admin_key)
        page.get_by_role("link", name="thread-20").click()
        main = page.locator("main")
        expect(page.get_by_role("heading", level=2).first).to_have_text("Conversation")
        expect(main).to_contain_text("the LangGraph adapter (agent langgraph)")
        messages = messages_of(page)
        expect(messages).to_have_count(state_pages.LIST_ITEMS)  # the newest page of 60 messages
        expect(messages.last).to_have_attribute("data-role", "assistant")
        expect(messages.last).to_contain_text(f"echo: turn {TURNS - 1}")
        expect(messages.nth(state_pages.LIST_ITEMS - 2)).to_have_attribute("data-role", "user")
        expect(messages.nth(state_pages.LIST_ITEMS - 2)).to_contain_text(f"turn {TURNS - 1}")
        expect(main).to_contain_text(f"{2 * TURNS} messages, kept by the LangGraph adapter")
        for internal in ("blob.", "cp.", "head.", "msgpack"):
            assert internal not in main.inner_text()
        expect(page.locator("details.bookkeeping")).not_to_have_attribute("open", "")
        shoot(page, screenshot_dir, "session-langgraph")

        page.get_by_role("link", name="Earlier messages").click()
        expect(messages_of(page).first).to_contain_text("turn 0")
        expect(messages_of(page)).to_have_count(2 * TURNS - state_pages.LIST_ITEMS)
        page.get_by_role("link", name="Later messages").click()
        expect(messages_of(page).last).to_contain_text(f"echo: turn {TURNS - 1}")

        page.locator("details.bookkeeping summary").click()
        page.get_by_role("link", name="Show every key of langgraph").click()
        expect(page.locator("section.value").first).to_be_visible()
        keys = page.locator("section.value h3 code").all_inner_texts()
        assert keys and all(key.startswith("blob.") for key in keys)  # keys in order: blobs first
        expect(page.get_by_role("link", name="More keys")).to_be_visible()  # cp., head. and w. keys follow
        expect(page.locator("section.adapter-conversation")).to_have_count(0)
        page.context.close()


def test_openai_and_adk_sessions_read_as_chats(browser: Browser, tmp_path: Path, screenshot_dir: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    on_own_loop(openai_session(url, "support-chat", OPENAI_ITEMS))
    on_own_loop(adk_session(url, "adk-1"))
    with running_server(url) as server:
        page = signed_in(browser, server, server.admin_key)
        page.goto("/console/sessions/support-chat")
        messages = messages_of(page)
        expect(messages).to_have_count(4)
        roles = ["user", "tool call", "tool output", "assistant"]
        expect(messages.locator(".role")).to_have_text(roles, ignore_case=True)
        expect(messages.nth(1)).to_contain_text('track({"parcel": 1042})')
        expect(messages.nth(2)).to_contain_text("left the depot at 09:12")
        expect(messages.nth(3).locator("pre.content")).to_have_text("It left the depot this morning.")  # as text
        expect(messages.nth(3).locator("pre.content")).not_to_have_class(re.compile("structured"))
        expect(page.locator("main")).to_contain_text("the OpenAI Agents adapter (agent openai-agents)")
        shoot(page, screenshot_dir, "session-openai")

        page.goto("/console/sessions/adk-1")
        expect(messages).to_have_count(4)
        expect(messages.locator(".role")).to_have_text(
            ["user", "desk_agent", "desk_agent", "desk_agent"], ignore_case=True
        )
        expect(messages.first).to_have_attribute("data-role", "user")
        expect(messages.nth(1)).to_contain_text('track({"parcel":1042})')
        expect(messages.nth(2)).to_contain_text('track → {"where":"depot"}')
        expect(messages.nth(3)).to_contain_text("It is at the depot.")
        state = page.locator("section.adapter-conversation pre.json")
        expect(state).to_contain_text('"topic": "parcel"')
        expect(state).to_contain_text('"step": 2')
        assert "ada.session" not in page.locator("main").inner_text()
        shoot(page, screenshot_dir, "session-adk")
        page.context.close()
