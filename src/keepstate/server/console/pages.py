"""The console's pages: one function per page, each reading through the platform's rules and rendering.

Every read and write goes through ``Platform`` (and ``StateApi`` for state) with the signed-in
``Caller``, exactly as the HTTP API's routes do: a member's page of another member's session or run
is the same 404 the API gives, the Keys page is the API's 403 for a member, and nothing here decides
who may see what. Listings are paged in the store (``desc`` listings with the API's ``after``
cursors), never loaded whole: a page costs what its rows cost, at any number of sessions and runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ... import values
from ...errors import InvalidRequest, NotAList, NotFound
from ...platform.models import Caller
from ...platform.service import Platform
from ...platform.state import Address, StateApi
from ...stores.records import RUN_STATUSES, StoredRun
from ..http import query_name
from ..routes import record_id
from . import auth, memory_pages, render, views
from .auth import SignedIn

PAGE = 50
"""Rows of a table per page (Sessions, Runs)."""
SESSION_RUNS = 20
CHILD_RUNS = 20
STATE_KEYS = 50
"""Keys of one namespace per page."""
LIST_ITEMS = 50
"""Items of a list (messages of a conversation) per page, read from the list's end."""
SESSION_AGENTS = 20
"""Agents whose state a Session page shows at once (``?agent=`` shows one)."""
POLL_IDS = 100
"""Runs one status poll may ask about."""
AGENT_COUNT_CAP = 1000
"""Runs counted per agent and status on the Agents page before the count shows as ``N+``."""


def platform_of(request: Request) -> Platform:
    found: Platform = request.app.state.platform
    return found


def state_api_of(request: Request) -> StateApi:
    found: StateApi = request.app.state.state_api
    return found


def after(request: Request, name: str = "after") -> str | None:
    return request.query_params.get(name) or None


def shown(request: Request, signed: SignedIn, template: str, **context: Any) -> Response:
    return render.page(template, signed=signed, csrf=signed.csrf, path=request.url.path, **context)


# ---------------------------------------------------------------- state of a session or a run


@dataclass(frozen=True, slots=True)
class StateSection:
    """One namespace's keys as a page shows them: ``agent`` (a session's agent, or a run's), its values,
    and the cursor of its next page of keys."""

    agent: str
    values: list[views.StateValue]
    next_keys: str | None
    keys_after: str | None


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
    keys_after = after(request, "keys_after") if paged else None
    wanted = list_page(request) if paged else None
    keys, next_keys = await api.keys(ns, "", keys_after or "", STATE_KEYS)
    found = [await read_value(api, ns, key, wanted[1] if wanted and wanted[0] == key else None) for key, _ in keys]
    return StateSection(address.agent, [value for value in found if value is not None], next_keys, keys_after)


# ---------------------------------------------------------------- pages


async def sessions(request: Request, signed: SignedIn) -> Response:
    platform = platform_of(request)
    user = query_name(request, "user")
    found = await platform.list_sessions(signed.caller, user, after(request), PAGE, desc=True)
    latest = {s.id: await latest_status(platform, signed.caller, s.id) for s in found.items}
    return shown(request, signed, "sessions.html", title="Sessions", sessions=found.items, latest=latest,
                 next=found.next, user=user or "", paged=after(request) is not None)


async def latest_status(platform: Platform, caller: Caller, session_id: str) -> str | None:
    found = await platform.list_runs(caller, {"session_id": session_id, "limit": 1, "desc": True})
    return found.items[0].status if found.items else None


async def session(request: Request, signed: SignedIn) -> Response:
    platform, caller = platform_of(request), signed.caller
    session_id = record_id(request, "session_id")
    found = await platform.get_session(caller, session_id)
    runs = await platform.list_runs(caller, {"session_id": session_id, "limit": SESSION_RUNS, "desc": True,
                                             "after": after(request, "runs_after")})
    chosen = query_name(request, "agent")
    agents = [chosen] if chosen else (await platform.session_agents(caller, session_id))[:SESSION_AGENTS]
    sections = [await state_section(request, caller, Address("session", id=session_id, agent=agent), bool(chosen))
                for agent in agents]
    folders = await memory_pages.user_folders(request, caller, found.user, agents)
    return shown(request, signed, "session.html", title=f"Session {session_id}", session=found,
                 metadata=views.pretty_bytes(found.metadata), runs=runs.items, next_runs=runs.next,
                 sections=sections, chosen=chosen, folders=folders)


async def runs(request: Request, signed: SignedIn) -> Response:
    status = request.query_params.get("status") or None
    if status is not None and status not in RUN_STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(RUN_STATUSES)}")
    agent = query_name(request, "agent")
    query = {"status": status, "agent": agent, "after": after(request), "limit": PAGE, "desc": True}
    found = await platform_of(request).list_runs(signed.caller, query)
    return shown(request, signed, "runs.html", title="Runs", runs=found.items, next=found.next,
                 status=status or "", agent=agent or "", statuses=RUN_STATUSES, paged=after(request) is not None)


async def run(request: Request, signed: SignedIn) -> Response:
    platform, caller = platform_of(request), signed.caller
    found = await platform.get_run(caller, record_id(request, "run_id"))
    children = await platform.list_runs(caller, {"parent_id": found.id, "limit": CHILD_RUNS, "desc": True,
                                                 "after": after(request, "children_after")})
    section = await state_section(request, caller, Address("run", id=found.id, agent=found.agent), True)
    return shown(request, signed, "run.html", title=f"Run {found.id}", run=found, payloads=payloads(found),
                 children=children.items, next_children=children.next, section=section)


def payloads(run: StoredRun) -> dict[str, str]:
    """The run's JSON fields that hold something: heading → indented JSON, in reading order."""
    fields = (("Input", run.input), ("Output", run.output), ("Error", run.error), ("Hold request", run.hold),
              ("Decision", run.decision))
    return {name: text for name, data in fields if (text := views.pretty_bytes(data)) is not None}


async def decide(request: Request, signed: SignedIn) -> Response:
    run_id = record_id(request, "run_id")
    form = await auth.signed_form(request, signed)
    choice = form.get("decision")
    if choice not in ("approve", "deny"):
        raise InvalidRequest("press Approve or Deny")
    note = form.get("note", "").strip()
    body = {"approved": choice == "approve", "data": {"note": note} if note else {}}
    await platform_of(request).decide(signed.caller, run_id, body)
    return render.redirect(f"{render.ROOT}/runs/{run_id}")


async def cancel(request: Request, signed: SignedIn) -> Response:
    run_id = record_id(request, "run_id")
    await auth.signed_form(request, signed)
    await platform_of(request).cancel(signed.caller, run_id)
    return render.redirect(f"{render.ROOT}/runs/{run_id}")


async def run_statuses(request: Request, signed: SignedIn) -> Response:
    """The status poll of the live pages: ``{runs: {id: {status, updated_at}}}`` for the runs asked
    about that the caller may see (others are left out, as if they did not exist)."""
    platform = platform_of(request)
    visible: list[StoredRun] = []
    for run_id in views.run_ids(request.query_params.get("ids"), POLL_IDS):
        try:
            if values.is_key(run_id):
                visible.append(await platform.get_run(signed.caller, run_id))
        except NotFound:
            continue
    return render.json({"runs": views.statuses(visible)})


async def agents(request: Request, signed: SignedIn) -> Response:
    rows = await agent_rows(platform_of(request), signed.caller)
    return shown(request, signed, "agents.html", title="Agents", agents=rows)


async def agent_rows(platform: Platform, caller: Caller) -> list[views.AgentRow]:
    """The Agents page's data, in one place: ``GET /v0/agents`` (``Platform.agents``, issue 13) is to
    replace this. Until then: the agents of the caller's queued, running and held runs, and of its
    latest page of runs, counted through ``list_runs`` (the newest ``AGENT_COUNT_CAP`` runs of each
    status: past that a count is a lower bound, marked); when a worker last claimed is not known yet."""
    counts: dict[str, dict[str, int]] = {}
    capped: set[str] = set()
    for status in ("queued", "running", "held"):
        found = await runs_with(platform, caller, status)
        if len(found) >= AGENT_COUNT_CAP:
            capped.add(status)
        for one in found:
            of_agent = counts.setdefault(one.agent, {})
            of_agent[status] = of_agent.get(status, 0) + 1
    recent = await platform.list_runs(caller, {"limit": PAGE, "desc": True})
    for one in recent.items:
        counts.setdefault(one.agent, {})
    return [views.AgentRow(name, c.get("queued", 0), c.get("running", 0), c.get("held", 0), None, frozenset(capped))
            for name, c in sorted(counts.items())]


async def runs_with(platform: Platform, caller: Caller, status: str) -> list[StoredRun]:
    """The caller's runs of one status, newest first, at most ``AGENT_COUNT_CAP``."""
    found: list[StoredRun] = []
    cursor: str | None = None
    while len(found) < AGENT_COUNT_CAP:
        part = await platform.list_runs(caller, {"status": status, "after": cursor, "desc": True,
                                                 "limit": min(1000, AGENT_COUNT_CAP - len(found))})
        found.extend(part.items)
        cursor = part.next
        if cursor is None:
            break
    return found


async def keys(request: Request, signed: SignedIn, created: tuple[Any, str] | None = None) -> Response:
    found = await platform_of(request).list_keys(signed.caller)
    return shown(request, signed, "keys.html", title="Keys", keys=found, created=created,
                 roles=("member", "admin", "worker"))


async def create_key(request: Request, signed: SignedIn) -> Response:
    form = await auth.signed_form(request, signed)
    name = form.get("name", "").strip() or None
    if name is not None and len(name) > 200:
        raise InvalidRequest("a key's name is at most 200 characters")
    created = await platform_of(request).issue_key(signed.caller, form.get("role"), name)
    return await keys(request, signed, created)


async def revoke_key(request: Request, signed: SignedIn) -> Response:
    key_id = record_id(request, "key_id")
    await auth.signed_form(request, signed)
    await platform_of(request).revoke_key(signed.caller, key_id)
    return render.redirect(f"{render.ROOT}/keys")
