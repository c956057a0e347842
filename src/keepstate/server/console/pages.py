"""The console's pages: one function per page, each reading through the platform's rules and rendering.

Every read and write goes through ``Platform`` (and ``StateApi`` for state) with the signed-in
``Caller``, exactly as the HTTP API's routes do: a member's page of another member's session or run
is the same 404 the API gives, the Keys page is the API's 403 for a member, and nothing here decides
who may see what. Listings are paged in the store (``desc`` listings with the API's ``after``
cursors), never loaded whole: a page costs what its rows cost, at any number of sessions and runs.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ... import values
from ...clock import now_ms
from ...errors import InvalidRequest, NotFound
from ...platform.forking import MAX_KEEP
from ...platform.models import Caller
from ...platform.service import Platform
from ...platform.state import Address
from ...stores.records import RUN_STATUSES, StoredRun
from ..http import query_name
from ..routes import record_id
from . import auth, render, run_events, views
from .auth import SignedIn
from .context import WAITING_CAP, after, owner_names, platform_of, shown, waiting_count
from .state_pages import state_section

PAGE = 50
"""Rows of a table per page (Sessions, Runs)."""
CHILD_RUNS = 20
KEEP_DIGITS = len(str(MAX_KEEP))
"""Digits an Items to keep may have: those of the platform's cap."""
POLL_IDS = 100
"""Runs one status poll may ask about."""


# ---------------------------------------------------------------- pages


async def sessions(request: Request, signed: SignedIn) -> Response:
    platform = platform_of(request)
    user = query_name(request, "user")
    found = await platform.list_sessions(signed.caller, user, after(request), PAGE, desc=True)
    latest = {s.id: await latest_status(platform, signed.caller, s.id) for s in found.items}
    return await shown(
        request,
        signed,
        "sessions.html",
        title="Sessions",
        sessions=found.items,
        latest=latest,
        owners=await owner_names(platform, signed.caller),
        next=found.next,
        user=user or "",
        paged=after(request) is not None,
    )


async def latest_status(platform: Platform, caller: Caller, session_id: str) -> str | None:
    found = await platform.list_runs(caller, {"session_id": session_id, "limit": 1, "desc": True})
    return found.items[0].status if found.items else None


async def runs(request: Request, signed: SignedIn) -> Response:
    status = request.query_params.get("status") or None
    if status is not None and status not in RUN_STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(RUN_STATUSES)}")
    agent = query_name(request, "agent")
    query = {"status": status, "agent": agent, "after": after(request), "limit": PAGE, "desc": True}
    found = await platform_of(request).list_runs(signed.caller, query)
    return await shown(
        request,
        signed,
        "runs.html",
        title="Runs",
        runs=found.items,
        next=found.next,
        status=status or "",
        agent=agent or "",
        statuses=RUN_STATUSES,
        paged=after(request) is not None,
    )


async def run(request: Request, signed: SignedIn) -> Response:
    platform, caller = platform_of(request), signed.caller
    found = await platform.get_run(caller, record_id(request, "run_id"))
    children = await platform.list_runs(
        caller, {"parent_id": found.id, "limit": CHILD_RUNS, "desc": True, "after": after(request, "children_after")}
    )
    section = await state_section(request, caller, Address("run", id=found.id, agent=found.agent), True)
    events = await run_events.events_view(request, found)
    return await shown(
        request,
        signed,
        "run.html",
        title=f"Run {found.id}",
        run=found,
        payloads=payloads(found),
        decision=views.decision_of(found.decision),
        children=children.items,
        next_children=children.next,
        section=section,
        events=events,
    )


def payloads(run: StoredRun) -> dict[str, str]:
    """The run's JSON fields that hold something: heading → indented JSON, in reading order."""
    fields = (
        ("Input", run.input),
        ("Output", run.output),
        ("Error", run.error),
        ("Hold request", run.hold),
    )
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
    if form.get("back") == "waiting":
        return render.redirect(render.href("waiting"))
    return render.redirect(render.href("runs", run_id))


async def cancel(request: Request, signed: SignedIn) -> Response:
    run_id = record_id(request, "run_id")
    await auth.signed_form(request, signed)
    await platform_of(request).cancel(signed.caller, run_id)
    return render.redirect(render.href("runs", run_id))


async def fork_session(request: Request, signed: SignedIn) -> Response:
    """The session page's Fork: a new session of the signed-in key holding a copy of the session's whole
    state (``Platform.fork_session``), with the list chosen in **List to cut** cut to its first
    **Items to keep**, then the fork's page, which links back to its parent."""
    session_id = record_id(request, "session_id")
    form = await auth.signed_form(request, signed)
    body = {"lists": fork_lists(form.get("list", ""), form.get("keep", "").strip())}
    made, _ = await platform_of(request).fork_session(signed.caller, session_id, body)
    return render.redirect(render.href("sessions", made.id))


def fork_lists(name: str, keep: str) -> dict[str, int] | None:
    """The fork form's cut as the API's ``lists`` (``{"AGENT/KEY": N}``; None: nothing cut). A count
    without a list, or a list without a count of 0 or more, is a 400 saying what is missing; the
    platform checks the rest (``forking.fork_cuts``: the name, the count's range; a key that is no
    list is its 409)."""
    if not name:
        if keep:
            raise InvalidRequest("choose the list to cut, or leave Items to keep empty to copy every list whole")
        return None
    if not keep.isdecimal() or not keep.isascii() or len(keep) > KEEP_DIGITS:
        raise InvalidRequest(f"say how many items of {name[:80]} the fork keeps: a whole number, 0 or more")
    return {name: int(keep)}


async def run_statuses(request: Request, signed: SignedIn) -> Response:
    """The poll of the live pages: ``{runs: {id: {status, updated_at}}, waiting}`` for the runs asked
    about that the caller may see (others are left out, as if they did not exist), and how many held
    runs wait for the caller (the header's count)."""
    platform = platform_of(request)
    visible: list[StoredRun] = []
    for run_id in views.run_ids(request.query_params.get("ids"), POLL_IDS):
        try:
            if values.is_key(run_id):
                visible.append(await platform.get_run(signed.caller, run_id))
        except NotFound:
            continue
    count = await waiting_count(platform, signed.caller)
    return render.json({"runs": views.statuses(visible), "waiting": views.capped(count, WAITING_CAP)})


async def agents(request: Request, signed: SignedIn) -> Response:
    """Every agent ``GET /v0/agents`` knows, with its counts and its workers' last claim."""
    now = now_ms()
    rows = [views.agent_row(stats, now) for stats in await platform_of(request).list_agents(signed.caller)]
    return await shown(request, signed, "agents.html", title="Agents", agents=rows, now=now)


async def keys(request: Request, signed: SignedIn, created: tuple[Any, str] | None = None) -> Response:
    found = await platform_of(request).list_keys(signed.caller)
    return await shown(
        request, signed, "keys.html", title="Keys", keys=found, created=created, roles=("member", "admin", "worker")
    )


async def create_key(request: Request, signed: SignedIn) -> Response:
    form = await auth.signed_form(request, signed)
    name = form.get("name", "").strip() or None
    created = await platform_of(request).issue_key(signed.caller, form.get("role"), name)
    return await keys(request, signed, created)


async def revoke_key(request: Request, signed: SignedIn) -> Response:
    key_id = record_id(request, "key_id")
    await auth.signed_form(request, signed)
    await platform_of(request).revoke_key(signed.caller, key_id)
    return render.redirect(render.href("keys"))
