"""What every page reads from its request: the app's platform and State API, cursors, and ``shown``,
which renders a page for the signed-in browser (its menu, its forms' anti-forgery value, where it is)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...platform.models import Caller
from ...platform.service import Platform
from ...platform.state import StateApi
from . import render, views
from .auth import SignedIn


def platform_of(request: Request) -> Platform:
    found: Platform = request.app.state.platform
    return found


def state_api_of(request: Request) -> StateApi:
    found: StateApi = request.app.state.state_api
    return found


def after(request: Request, name: str = "after") -> str | None:
    return request.query_params.get(name) or None


async def owner_names(platform: Platform, caller: Caller) -> dict[str, str]:
    """Names of the keys that own sessions, by key id, as the caller may know them: every named key
    of the environment for an admin, its own for a member (the only owner it sees). A page shows an
    owner by name, and by id when it has none."""
    if caller.is_admin:
        return {key.id: key.name for key in await platform.list_keys(caller) if key.name}
    return {caller.key_id: caller.name} if caller.name else {}


WAITING_CAP = 99
"""Held runs the header counts before it says ``99+``."""


async def waiting_count(platform: Platform, caller: Caller) -> int:
    """How many held runs wait for the caller's decision (its own; an admin's: the environment's),
    counted up to ``WAITING_CAP + 1``: one read of at most that many rows, on every page."""
    found = await platform.list_runs(caller, {"status": "held", "limit": WAITING_CAP + 1, "desc": True})
    return len(found.items)


async def shown(request: Request, signed: SignedIn, template: str, **context: Any) -> Response:
    """A page for the signed-in browser, with the header's count of runs waiting for it."""
    count = await waiting_count(platform_of(request), signed.caller)
    return render.page(
        template,
        signed=signed,
        csrf=signed.csrf,
        path=request.url.path,
        waiting=views.capped(count, WAITING_CAP),
        **context,
    )
