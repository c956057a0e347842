"""Framework adapters' conversations as the console shows them (no I/O): which keys of a scope hold
a conversation, which are the adapter's bookkeeping, and how each stored item reads as a message.

The layouts are what the adapters in ``keepstate.integrations`` write; the console recognises them
without importing the adapters, whose frameworks are optional extras (``tests/console/
test_console_adapters.py`` checks these names against the adapters' own modules):

- **LangGraph** (``KeepstateSaver``): agent ``langgraph``; ``messages`` is the saver's readable copy
  of the thread's messages (``{role, content, id}``); ``head.``, ``cp.``, ``blob.`` and ``w.`` keys are
  checkpoints, channel values and pending writes in the saver's own encoding.
- **OpenAI Agents** (``KeepstateSession``): agent ``openai-agents``; the Responses API items in the
  lists ``history.0001`` … then ``items`` (oldest first); ``history`` counts the archived parts.
- **Google ADK** (``KeepstateSessionService``): any agent (the ADK app); per ADK user ``U`` the record
  ``U.session`` (its state among its fields) and the events in ``U.events``, ``U.events.1`` …, each
  item ``{role: author, content: text, event}``.

Anything else is read as plain state. A reader never raises on what it does not know: an item of an
unknown shape is a message whose text is the item's JSON, set apart as structured.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

LANGGRAPH_AGENT = "langgraph"
LANGGRAPH_MESSAGES = "messages"
LANGGRAPH_BOOKKEEPING = ("head.", "cp.", "blob.", "w.")
OPENAI_AGENT = "openai-agents"
OPENAI_ITEMS = "items"
OPENAI_PARTS = "history"
ADK_RECORD = re.compile(r"(?P<user>.+)\.session")
ADK_EVENTS = re.compile(r"(?P<user>.+)\.events(?:\.(?P<chunk>[0-9]+))?")
SIDES = frozenset({"user", "assistant", "system", "tool"})
"""How a message is set on the page (``data-role``): the user's on one side, the agent's on the other,
system and tool messages across."""


@dataclass(frozen=True, slots=True)
class Said:
    """One stored item as a message: who said it (shown), the side it sits on, and its text (an item
    or content that is not text is indented JSON, flagged ``structured``)."""

    role: str
    side: str
    text: str
    structured: bool = False


Reader = Callable[[Any], Said]


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation an adapter keeps in a scope. ``key`` names it in links (its newest or only
    list); ``source`` says which lists hold it, oldest first: ``one`` (``key`` alone), ``counted``
    (``openai_parts`` of the count in ``OPENAI_PARTS``) or ``chunks`` (``adk_parts`` of ``user``);
    ``record`` is a value holding the conversation's state (ADK); ``read`` turns an item into a message."""

    key: str
    title: str
    read: Reader
    source: str = "one"
    record: str | None = None
    user: str | None = None


@dataclass(frozen=True, slots=True)
class Adapter:
    """What a framework adapter keeps in one scope: its name, for people, and its conversations."""

    name: str
    conversations: tuple[Conversation, ...]


def recognise(agent: str, keys: Iterable[str]) -> Adapter | None:
    """The adapter whose layout a scope of ``agent`` holding ``keys`` (its first page of keys) has."""
    if agent == LANGGRAPH_AGENT:
        return Adapter("LangGraph", (Conversation(LANGGRAPH_MESSAGES, "Conversation", chat_message),))
    if agent == OPENAI_AGENT:
        return Adapter("OpenAI Agents", (Conversation(OPENAI_ITEMS, "Conversation", openai_item, "counted"),))
    users = adk_users(keys)
    if not users:
        return None
    return Adapter("Google ADK", tuple(adk_conversation(user, len(users) > 1) for user in users))


def adk_conversation(user: str, several: bool) -> Conversation:
    title = f"Conversation of ADK user {user}" if several else "Conversation"
    return Conversation(f"{user}.events", title, adk_event, "chunks", f"{user}.session", user)


def adk_users(keys: Iterable[str]) -> list[str]:
    """The ADK users of a scope: those with both a session record and a first events list."""
    names = set(keys)
    records = {found["user"] for key in names if (found := ADK_RECORD.fullmatch(key))}
    return sorted(user for user in records if f"{user}.events" in names)


def openai_parts(archived: Any) -> tuple[str, ...]:
    """The OpenAI session's lists oldest first, from the stored count of archived parts."""
    count = archived if isinstance(archived, int) and not isinstance(archived, bool) and archived > 0 else 0
    return (*(f"{OPENAI_PARTS}.{number:04d}" for number in range(1, count + 1)), OPENAI_ITEMS)


def adk_parts(user: str, keys: Iterable[str]) -> tuple[str, ...]:
    """An ADK user's events lists in order (``U.events``, ``U.events.1``, …) among ``keys``."""
    chunks = []
    for key in keys:
        found = ADK_EVENTS.fullmatch(key)
        if found and found["user"] == user:
            chunks.append((int(found["chunk"] or 0), key))
    return tuple(key for _, key in sorted(chunks))


def adk_state(record: Any) -> dict[str, Any] | None:
    """The session state an ADK record keeps (values wrapped as ``{"key": [value]}``), or None."""
    state = record.get("state") if isinstance(record, dict) else None
    if not isinstance(state, dict):
        return None
    return {key: value[0] if isinstance(value, list) and value else value for key, value in state.items()}


# ---------------------------------------------------------------- readers


def pretty(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def side_of(role: str) -> str:
    return role if role in SIDES else "assistant"


def text_of(content: Any) -> str | None:
    """Content as text: a string, or a list of text parts (``{"type": "text", "text": …}`` and the
    like, or strings); None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts = [part_text(part) for part in content]
        if all(text is not None for text in texts):
            return "\n".join(text for text in texts if text is not None)
    return None


def part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        for field in ("text", "refusal"):
            if isinstance(part.get(field), str):
                return str(part[field])
    return None


def said(role: str, content: Any, side: str | None = None) -> Said:
    text = text_of(content)
    if text is None:
        return Said(role, side or side_of(role), pretty(content), True)
    return Said(role, side or side_of(role), text)


def unknown(item: Any, role: str = "item") -> Said:
    return Said(role, "system", pretty(item), True)


def is_message(item: Any) -> bool:
    """A ``{role, content}`` object: a string role and a content (more fields are allowed)."""
    return isinstance(item, dict) and isinstance(item.get("role"), str) and "content" in item


def chat_message(item: Any) -> Said:
    """A ``{role, content}`` item (what agents keep as history, and LangGraph's readable copy)."""
    if not is_message(item):
        return unknown(item)
    return said(item["role"], item["content"])


def openai_item(item: Any) -> Said:
    """A Responses API item: a message, a tool call and its output, reasoning; else its JSON."""
    if is_message(item):
        return said(item["role"], item["content"])
    kind = item.get("type") if isinstance(item, dict) else None
    if kind == "function_call" and isinstance(item.get("name"), str):
        return Said("tool call", "tool", f"{item['name']}({item.get('arguments', '')})")
    if kind == "function_call_output":
        return said("tool output", item.get("output"), "tool")
    if kind == "reasoning":
        summary = item.get("summary")
        texts = [part_text(part) for part in summary] if isinstance(summary, list) else []
        return Said("reasoning", "system", "\n".join(text for text in texts if text) or "(reasoning)")
    return unknown(item, kind if isinstance(kind, str) else "item")


def adk_event(item: Any) -> Said:
    """An ADK event item: its author and text, or its function calls and responses when it has no text."""
    if not isinstance(item, dict) or not isinstance(item.get("role"), str):
        return unknown(item)
    author = item["role"]
    side = "user" if author == "user" else "assistant"
    if isinstance(item.get("content"), str) and item["content"]:
        return Said(author, side, item["content"])
    parts = adk_parts_of(item.get("event"))
    if not parts:
        return Said(author, side, "(no text)")
    calls = [adk_part(part) for part in parts]
    return Said(author, "tool", "\n".join(calls), structured=True)


def adk_parts_of(event: Any) -> Sequence[Any]:
    content = event.get("content") if isinstance(event, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def adk_part(part: Any) -> str:
    """One part of an event's content: a call as ``name(args)``, a response as ``name → response``."""
    if isinstance(part, dict):
        call, answer = part.get("function_call"), part.get("function_response")
        if isinstance(call, dict):
            return f"{call.get('name')}({orjson.dumps(call.get('args')).decode()})"
        if isinstance(answer, dict):
            return f"{answer.get('name')} → {orjson.dumps(answer.get('response')).decode()}"
        if isinstance(part.get("text"), str):
            return str(part["text"])
    return orjson.dumps(part).decode()
