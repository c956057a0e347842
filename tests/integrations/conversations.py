"""One conversation driven through a framework's own storage interface, the way an agent uses it.

The baselines (two_writers.py) and the benchmark (bench/bench_frameworks.py) need the same thing
from every store: add one message to a conversation, read its recent messages, read all of it.
Each class here does that through one framework interface, exactly as that framework's users do:

- ``CheckpointerConversation``: a LangGraph graph over ``MessagesState`` compiled with a
  checkpointer; a message is one ``invoke`` (the checkpointer loads the thread, the reducer adds
  the message, the checkpointer writes the new checkpoint).
- ``StoreConversation``: a LangGraph ``BaseStore`` item holding the message list (get, add, put).
- ``AdkConversation``: an ADK ``BaseSessionService``; a message is ``get_session`` then
  ``append_event``, as ADK's Runner does each turn.
- ``OpenAISessionConversation``: an OpenAI Agents ``Session``: ``add_items`` / ``get_items``, and
  ``pop`` (``pop_item``), which only this interface has.

They take the interface object, not a path, so keepstate's adapters drive through the same code.
``OPENERS`` names a way to open one (``opener(location, conversation_id)``) for child processes,
which must rebuild their store from a name; keepstate's entries are added in part 2.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
import zlib
from collections.abc import Callable
from contextlib import ExitStack, suppress
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

NAMESPACE = ("conversations",)


class Conversation(Protocol):
    def append(self, text: str) -> None: ...
    def recent(self, count: int) -> list[str]: ...
    def texts(self) -> list[str]: ...
    def close(self) -> None: ...


class CheckpointerConversation:
    """A thread of a one-node LangGraph graph (``MessagesState``) over ``saver``."""

    def __init__(self, saver: Any, thread_id: str, on_close: Callable[[], None] | None = None) -> None:
        from langgraph.graph import END, START, MessagesState, StateGraph

        builder = StateGraph(MessagesState)
        builder.add_node("agent", lambda state: {"messages": []})
        builder.add_edge(START, "agent")
        builder.add_edge("agent", END)
        self._graph = builder.compile(checkpointer=saver)
        self._config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        self._on_close = on_close

    def append(self, text: str) -> None:
        from langchain_core.messages import HumanMessage

        self._graph.invoke({"messages": [HumanMessage(content=text, id=uuid.uuid4().hex)]}, self._config)

    def recent(self, count: int) -> list[str]:
        return self.texts()[-count:]

    def texts(self) -> list[str]:
        messages = self._graph.get_state(self._config).values.get("messages", [])
        return [str(message.content) for message in messages]

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()


class StoreConversation:
    """One ``BaseStore`` item whose value is ``{"messages": [...]}`` (read, add, write back)."""

    def __init__(self, store: Any, key: str, on_close: Callable[[], None] | None = None) -> None:
        self._store, self._key, self._on_close = store, key, on_close

    def append(self, text: str) -> None:
        self._store.put(NAMESPACE, self._key, {"messages": [*self.texts(), text]})

    def recent(self, count: int) -> list[str]:
        return self.texts()[-count:]

    def texts(self) -> list[str]:
        item = self._store.get(NAMESPACE, self._key)
        return list(item.value["messages"]) if item is not None else []

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()


class StoreUpdateConversation(StoreConversation):
    """``StoreConversation`` whose append is one atomic read-modify-write of the item
    (``KeepstateStore.update``, beyond BaseStore), instead of a get then a put."""

    def append(self, text: str) -> None:
        self._store.update(NAMESPACE, self._key, lambda value: {"messages": [*(value or {}).get("messages", []), text]})


class _AsyncDriven:
    """A private event loop, so the async interfaces are driven from plain code and processes."""

    def __init__(self) -> None:
        self._runner = asyncio.Runner()

    def run(self, coroutine: Any) -> Any:
        return self._runner.run(coroutine)

    def close(self) -> None:
        self._runner.close()


class AdkConversation(_AsyncDriven):
    """One ADK session (app ``bench``, user ``user``); created on first use by whoever is first."""

    APP, USER = "bench", "user"

    def __init__(self, service: Any, session_id: str) -> None:
        super().__init__()
        self._service, self._id = service, session_id
        self.run(self._ensure_session())

    async def _ensure_session(self) -> None:
        from google.adk.errors.already_exists_error import AlreadyExistsError

        if await self._get() is None:
            with suppress(AlreadyExistsError):
                await self._service.create_session(app_name=self.APP, user_id=self.USER, session_id=self._id)

    async def _get(self, recent: int | None = None) -> Any:
        from google.adk.sessions.base_session_service import GetSessionConfig

        config = None if recent is None else GetSessionConfig(num_recent_events=recent)
        return await self._service.get_session(app_name=self.APP, user_id=self.USER, session_id=self._id, config=config)

    async def _append(self, text: str) -> None:
        from google.adk.events.event import Event
        from google.genai import types

        session = await self._get()
        content = types.Content(role="user", parts=[types.Part(text=text)])
        await self._service.append_event(session, Event(invocation_id=uuid.uuid4().hex, author="user", content=content))

    def append(self, text: str) -> None:
        self.run(self._append(text))

    def recent(self, count: int) -> list[str]:
        return _event_texts(self.run(self._get(count)))

    def texts(self) -> list[str]:
        return _event_texts(self.run(self._get()))

    def close(self) -> None:
        closer = getattr(self._service, "close", None)
        if closer is not None:
            self.run(closer())
        super().close()


def _event_texts(session: Any) -> list[str]:
    return [
        part.text
        for event in session.events
        if event.content
        for part in event.content.parts or []
        if part.text is not None
    ]


class OpenAISessionConversation(_AsyncDriven):
    """An OpenAI Agents ``Session``: one user item per message."""

    def __init__(self, session: Any) -> None:
        super().__init__()
        self._session = session

    def append(self, text: str) -> None:
        self.run(self._session.add_items([{"role": "user", "content": text}]))

    def recent(self, count: int) -> list[str]:
        return [item["content"] for item in self.run(self._session.get_items(limit=count))]

    def texts(self) -> list[str]:
        return [item["content"] for item in self.run(self._session.get_items())]

    def pop(self) -> str | None:
        """``pop_item``: the newest message, removed; None once the session is empty."""
        item = self.run(self._session.pop_item())
        return None if item is None else str(item["content"])

    def close(self) -> None:
        self._session.close()
        super().close()


def langgraph_sqlite_saver(path: str, conversation_id: str) -> Conversation:
    from langgraph.checkpoint.sqlite import SqliteSaver

    connection = sqlite3.connect(path, check_same_thread=False)
    return CheckpointerConversation(SqliteSaver(connection), conversation_id, on_close=connection.close)


def langgraph_sqlite_store(path: str, conversation_id: str) -> Conversation:
    from langgraph.store.sqlite import SqliteStore

    stack = ExitStack()
    store = stack.enter_context(SqliteStore.from_conn_string(path))
    store.setup()
    return StoreConversation(store, conversation_id, on_close=stack.close)


def adk_database_sqlite(path: str, conversation_id: str) -> Conversation:
    from google.adk.sessions import DatabaseSessionService

    return AdkConversation(DatabaseSessionService(f"sqlite+aiosqlite:///{path}"), conversation_id)


def openai_sqlite_session(path: str, conversation_id: str) -> Conversation:
    from agents import SQLiteSession

    return OpenAISessionConversation(SQLiteSession(conversation_id, path))


def keepstate_store(location: str, conversation_id: str) -> Conversation:
    """keepstate's ``KeepstateStore`` on a store URL, or on the SQLite file at a plain path."""
    from keepstate.integrations.langgraph.store import KeepstateStore

    store = KeepstateStore(store_url(location))
    return StoreConversation(store, conversation_id, on_close=store.close)


def keepstate_store_update(location: str, conversation_id: str) -> Conversation:
    """The same item through ``KeepstateStore.update``: each append one compare-and-set."""
    from keepstate.integrations.langgraph.store import KeepstateStore

    store = KeepstateStore(store_url(location))
    return StoreUpdateConversation(store, conversation_id, on_close=store.close)


def keepstate_openai_session(location: str, conversation_id: str) -> Conversation:
    """keepstate's ``KeepstateSession`` on a store URL, or on the SQLite file at a plain path."""
    from keepstate.integrations.openai_agents import KeepstateSession

    return OpenAISessionConversation(KeepstateSession(conversation_id, store_url(location)))


class PaddedOpenAISessionConversation(OpenAISessionConversation):
    """An OpenAI ``Session`` whose messages carry a tool output's worth more: 12 KiB for one message
    in four (picked by a hash of its text), 1 KiB for the others, so a few hundred of them pass the
    1 MiB of one keepstate list, and small ones still fit where a big one no longer does."""

    def append(self, text: str) -> None:
        padding = 12_288 if zlib.crc32(text.encode()) % 4 == 0 else 1024
        self.run(self._session.add_items([{"role": "user", "content": text, "output": "x" * padding}]))


def keepstate_openai_session_padded(location: str, conversation_id: str) -> Conversation:
    """``keepstate_openai_session`` with 1–12 KiB messages: races that cross the session's parts."""
    from keepstate.integrations.openai_agents import KeepstateSession

    return PaddedOpenAISessionConversation(KeepstateSession(conversation_id, store_url(location)))


def keepstate_adk(location: str, conversation_id: str) -> Conversation:
    """keepstate's ADK session service on a store URL (a bare path: a SQLite file)."""
    from keepstate.integrations.adk import KeepstateSessionService

    return AdkConversation(KeepstateSessionService(store_url(location)), conversation_id)


def store_url(location: str) -> str:
    """A keepstate store URL: ``location`` itself, or the SQLite file at that path."""
    return location if "://" in location else f"sqlite:///{location}"


def keepstate_saver(location: str, conversation_id: str) -> Conversation:
    """keepstate's KeepstateSaver under the same graph; ``location`` is a store URL or a SQLite path."""
    from keepstate.integrations.langgraph import KeepstateSaver

    saver = KeepstateSaver(store_url(location))
    return CheckpointerConversation(saver, conversation_id, on_close=saver.close)


# name -> opener(location, conversation_id); a framework store's location is a SQLite file path,
# keepstate's (names starting "keepstate") a store URL or a SQLite file path.
OPENERS: dict[str, Callable[[str, str], Conversation]] = {
    "LangGraph SqliteSaver": langgraph_sqlite_saver,
    "LangGraph SqliteStore": langgraph_sqlite_store,
    "ADK DatabaseSessionService (SQLite)": adk_database_sqlite,
    "OpenAI SQLiteSession": openai_sqlite_session,
    "keepstate KeepstateSaver": keepstate_saver,
    "keepstate KeepstateStore": keepstate_store,
    "keepstate KeepstateStore.update": keepstate_store_update,
    "keepstate KeepstateSession": keepstate_openai_session,
    "keepstate KeepstateSession, 1-12 KiB messages": keepstate_openai_session_padded,
    "keepstate ADK": keepstate_adk,
}
