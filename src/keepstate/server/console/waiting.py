"""Waiting for you: the held runs the signed-in key may decide, newest first, each with its request
and the Approve and Deny of its Run page, live (``console.js`` refreshes the list in place).

A member's are the held runs of its own sessions and runs, an admin's every held run of the
environment: the visibility of ``GET /v0/runs?status=held``, read a page at a time in the store.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from ...stores.records import StoredRun
from . import views
from .auth import SignedIn
from .context import after, platform_of, shown

PAGE = 50


@dataclass(frozen=True, slots=True)
class Waiting:
    """A held run and what it asks, as indented JSON (None: it asked nothing)."""

    run: StoredRun
    request: str | None


async def page(request: Request, signed: SignedIn) -> Response:
    query = {"status": "held", "limit": PAGE, "desc": True, "after": after(request)}
    found = await platform_of(request).list_runs(signed.caller, query)
    held = [Waiting(run, views.pretty_bytes(run.hold)) for run in found.items]
    return await shown(
        request,
        signed,
        "waiting.html",
        title="Waiting for you",
        held=held,
        next=found.next,
        paged=after(request) is not None,
    )
