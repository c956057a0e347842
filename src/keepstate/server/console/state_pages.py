"""The console's state: a session's page (its adapters' conversations first, its runs, its state by
agent, its end user's memory), a run's state, and the pages of an agent's and an end user's state.

Every read goes through ``StateApi`` with the namespace its ``namespace`` rule gives the signed-in
caller, as the API's "state for callers" routes do: the agent and user scopes are for admins (a
member's request is the API's 403). A scope is read a page of keys at a time, a list a page of items
from its end (``?key=K&end=N``). A scope a framework adapter wrote (``conversations.recognise``)
shows its conversation, paged across the lists that hold it, and its bookkeeping keys only on
demand (``?agent=A&raw=1``): what a person came for first, the adapter's internals one click away.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ...errors import InvalidRequest, NotAList, NotFound
from ...platform.models import Caller
from ...platform.state import Address, StateApi
from ..http import query_name
from ..routes import path, record_id
from . import conversations, memory_pages, views
from .auth import SignedIn
from .context import after, owner_names, platform_of, shown, state_api_of

SESSION_RUNS = 20
STATE_KEYS = 50
"""Keys of one namespace per page."""
LIST_ITEMS = 50
"""Items of a list (messages of a conversation) per page, read from the list's end."""
SESSION_AGENTS = 20
"""Agents whose state a Session page shows at once (``?agent=`` shows one)."""
PART_KEYS = 1000
"""Lists one conversation may span (an ADK user's events past 1,000 MiB are not shown)."""


@dataclass(frozen=True, slots=True)
class StateSection:
    """One namespace's keys as a page shows them: ``agent`` (a session's agent, or a run's), its values,
    and the cursor of its next page of keys."""

    agent: str
    values: list[views.StateValue]
    next_keys: str | None
    keys_after: str | None


@dataclass(frozen=True, slots=True)
class ConversationView:
    """A framework adapter's conversation as a page shows it: its page of messages (None: nothing kept
    yet) and, for an ADK session, the session's state as indented JSON."""

    title: str
    value: views.StateValue | None
    state: str | None = None


@dataclass(frozen=True, slots=True)
class AdapterSection:
    """A session scope a framework adapter wrote: its agent, the adapter's name, its conversations."""

    agent: str
    adapter: str
    conversations: list[ConversationView]


Listed = tuple[list[tuple[str, int]], str | None]


# ---------------------------------------------------------------- reading a scope


async def read_value(api: StateApi, ns: str, key: str, end: int | None) -> views.StateValue | None:
    """One key's value: a list by its page ending at ``end`` (None: its last page), anything else
    whole. None when it went away between the listing and this read."""
    bounds = None if end is None else views.page_before(end, LIST_ITEMS)
    try:
        if bounds is None:
            part = await api.read_list(ns, key, LIST_ITEMS, None, None)
            return views.list_value(key, part, part.length - len(part.items), LIST_ITEMS)
        part = await api.read_list(ns, key, None, *bounds)
        return views.list_value(key, part, bounds[0], LIST_ITEMS)
    except NotAList:
        try:
            return views.json_value(key, await api.get(ns, key))
        except NotFound:
            return None
    except NotFound:
        return None


def list_page(request: Request) -> tuple[str, int] | None:
    """The page of one list a request asks for (``?key=K&end=N``: the items before ``N`` of ``K``)."""
    key, text = request.query_params.get("key"), request.query_params.get("end")
    if key is None and text is None:
        return None
    if key is None or text is None or not text.isdigit() or len(text) > 18:
        raise InvalidRequest("a page of a list is asked for with key and end (the index the page ends at)")
    return key, int(text)


async def state_section(request: Request, caller: Caller, address: Address, paged: bool) -> StateSection:
    """A namespace's first page of keys (or, when ``paged``, the one ``?keys_after=`` asks for), each
    key's value read as ``read_value`` does."""
    api = state_api_of(request)
    ns = await api.namespace(platform_of(request), caller, address)
    return await section_of(request, api, ns, address.agent, paged)


async def section_of(
    request: Request, api: StateApi, ns: str, agent: str, paged: bool, listed: Listed | None = None
) -> StateSection:
    """``state_section`` of a namespace at hand; ``listed``: its first page of keys, if already read."""
    keys_after = after(request, "keys_after") if paged else None
    wanted = list_page(request) if paged else None
    if listed is None or keys_after is not None:
        listed = await api.keys(ns, "", keys_after or "", STATE_KEYS)
    keys, next_keys = listed
    found = [await read_value(api, ns, key, wanted[1] if wanted and wanted[0] == key else None) for key, _ in keys]
    return StateSection(agent, [value for value in found if value is not None], next_keys, keys_after)


# ---------------------------------------------------------------- an adapter's conversation


async def adapter_section(
    request: Request, api: StateApi, ns: str, agent: str, adapter: conversations.Adapter, paged: bool
) -> AdapterSection:
    wanted = list_page(request) if paged else None
    found = [
        await read_conversation(api, ns, one, wanted[1] if wanted and wanted[0] == one.key else None)
        for one in adapter.conversations
    ]
    return AdapterSection(agent, adapter.name, found)


async def read_conversation(
    api: StateApi, ns: str, one: conversations.Conversation, end: int | None
) -> ConversationView:
    """The page of a conversation ending at ``end`` (None: its last page), read across its lists."""
    parts = await parts_of(api, ns, one)
    sizes = [await list_size(api, ns, key) for key in parts]
    total = sum(length for length, _ in sizes)
    state = await record_state(api, ns, one.record)
    if total == 0:
        return ConversationView(one.title, None, state)
    bounds = None if end is None else views.page_before(min(end, total), LIST_ITEMS)
    start, count = bounds or (max(0, total - LIST_ITEMS), min(total, LIST_ITEMS))
    items: list[object] = []
    for key, begin, many in views.spans(parts, [length for length, _ in sizes], start, count):
        try:
            items += [orjson.loads(item) for item in (await api.read_list(ns, key, None, begin, many)).items]
        except (NotFound, NotAList):
            continue  # gone since its size was read: the page shows what is left
    version = max(version for _, version in sizes)
    value = views.conversation_value(one.key, version, items, start, total, LIST_ITEMS, one.read)
    return ConversationView(one.title, value, state)


async def parts_of(api: StateApi, ns: str, one: conversations.Conversation) -> tuple[str, ...]:
    """The lists holding a conversation, oldest first."""
    if one.source == "counted":
        return conversations.openai_parts(await stored(api, ns, conversations.OPENAI_PARTS))
    if one.source == "chunks":
        keys, _ = await api.keys(ns, one.key, "", PART_KEYS)
        return conversations.adk_parts(one.user or "", [key for key, _ in keys])
    return (one.key,)


async def list_size(api: StateApi, ns: str, key: str) -> tuple[int, int]:
    """A list's length and version; ``(0, 0)`` when absent or not a list."""
    try:
        page = await api.read_list(ns, key, 1, None, None)
    except (NotFound, NotAList):
        return 0, 0
    return page.length, page.version


async def stored(api: StateApi, ns: str, key: str) -> object:
    """A key's value, parsed (a list too, whole: the keys read this way hold small records); None when
    absent."""
    try:
        return orjson.loads((await api.get(ns, key)).data)
    except (NotFound, NotAList):
        return None


async def record_state(api: StateApi, ns: str, record: str | None) -> str | None:
    """The session state an ADK record keeps, indented; None without a record or state."""
    state = None if record is None else conversations.adk_state(await stored(api, ns, record))
    return None if not state else views.pretty(state)


# ---------------------------------------------------------------- pages


async def session(request: Request, signed: SignedIn) -> Response:
    platform, caller, api = platform_of(request), signed.caller, state_api_of(request)
    session_id = record_id(request, "session_id")
    found = await platform.get_session(caller, session_id)
    runs = await platform.list_runs(
        caller, {"session_id": session_id, "limit": SESSION_RUNS, "desc": True, "after": after(request, "runs_after")}
    )
    chosen = query_name(request, "agent")
    raw = chosen is not None and request.query_params.get("raw") == "1"
    agents = [chosen] if chosen else (await platform.session_agents(caller, session_id))[:SESSION_AGENTS]
    adapters: list[AdapterSection] = []
    sections: list[StateSection] = []
    for agent in agents:
        ns = await api.namespace(platform, caller, Address("session", id=session_id, agent=agent))
        listed = await api.keys(ns, "", "", STATE_KEYS)
        adapter = None if raw else conversations.recognise(agent, [key for key, _ in listed[0]])
        if adapter is None:
            sections.append(await section_of(request, api, ns, agent, bool(chosen), listed))
        else:
            adapters.append(await adapter_section(request, api, ns, agent, adapter, bool(chosen)))
    folders = await memory_pages.user_folders(request, caller, found.user, agents)
    return await shown(
        request,
        signed,
        "session.html",
        title=f"Session {session_id}",
        session=found,
        owners=await owner_names(platform, caller),
        metadata=views.pretty_bytes(found.metadata),
        runs=runs.items,
        next_runs=runs.next,
        adapters=adapters,
        sections=sections,
        cuttable=views.cuttable(sections),
        chosen=chosen,
        raw=raw,
        folders=[folder for folder in folders.values() if folder.documents],
    )


async def scope_state(request: Request, signed: SignedIn) -> Response:
    """``/console/agents/{agent}/state``: the agent's own state, or with ``?user=U`` its state for the
    end user ``U`` (the API's agent and user scopes: admins only)."""
    agent = path(request, "agent")
    user = query_name(request, "user")
    address = Address("agent", agent=agent) if user is None else Address("user", id=user, agent=agent)
    section = await state_section(request, signed.caller, address, True)
    title = f"State of agent {agent}" if user is None else f"State of user {user} with agent {agent}"
    return await shown(request, signed, "scope.html", title=title, agent=agent, user=user or "", section=section)
