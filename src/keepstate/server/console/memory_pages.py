"""The console's memory pages: an agent's documents and search, one document, a user's folder.

Every read goes through ``MemoryApi`` with the view the HTTP API's callers' routes build
(``admin_view``): the agent's whole memory for ``/v0/agents/{agent}/memory``, one end user's folder
for ``/v0/users/{user}/memory/{agent}``. Those routes are for admins, so these pages are too: a
member's request is the API's 403, and a Session page shows its end user's folder to admins only.
Listings are paged in the store by path (``after``), searches are the store's own engine, as for
the API.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from ...errors import InvalidRequest, NoEmbedder
from ...memory_rules import View
from ...platform.memory import MemoryApi, admin_view
from ...platform.models import Caller
from ...semantic import HYBRID, SEMANTIC, TEXT
from ...stores.documents import DocumentHead, StoredHit
from ..memory_routes import memory_api
from ..routes import path
from . import context, views
from .auth import SignedIn

DOCUMENTS = 50
"""Documents of a listing per page."""
HITS = 20
"""Hits a search shows."""
FOLDER_DOCUMENTS = 20
"""Documents of a user's folder a Session page shows, per agent, before linking to the rest."""


def memory_of(request: Request) -> MemoryApi | None:
    """The server's ``MemoryApi``, None on a store without documents."""
    found: MemoryApi | None = request.app.state.memory_api
    return found


@dataclass(frozen=True, slots=True)
class Search:
    """A search as the page shows it: the query typed, its hits (None: nothing searched), or why the
    query was refused; the mode searched in, and the modes offered (none without an embedder: words only)."""

    query: str
    hits: list[StoredHit] | None = None
    error: str | None = None
    mode: str = TEXT
    modes: tuple[tuple[str, str], ...] = ()


MODE_LABELS = ((HYBRID, "Words and meaning"), (SEMANTIC, "Meaning"), (TEXT, "Words"))
"""The mode switch of a memory with an embedder, its default first."""


async def memory(request: Request, signed: SignedIn) -> Response:
    """``/console/agents/{agent}/memory``: the agent's documents under ``?prefix=``, paged, and a search."""
    agent = path(request, "agent")
    view = admin_view(signed.caller, agent)
    api = memory_api(request)
    prefix = request.query_params.get("prefix", "")
    paged = context.after(request)
    documents, next_after = await api.listing(view, prefix, paged or "", DOCUMENTS)
    search = await searched(api, request, view, prefix)
    answer = await context.shown(
        request,
        signed,
        "memory.html",
        title=f"Memory of {agent}",
        agent=agent,
        prefix=prefix,
        documents=documents,
        next=next_after,
        paged=paged is not None,
        search=search,
    )
    if search.error is not None:
        answer.status_code = 400
    return answer


async def searched(api: MemoryApi, request: Request, view: View, prefix: str) -> Search:
    """The page's search (``?q=``, ``?mode=`` when memory has an embedder), through the store's engine;
    a malformed query is shown, not raised."""
    query = request.query_params.get("q", "")
    modes = MODE_LABELS if api.embedder is not None else ()
    mode = request.query_params.get("mode") or (HYBRID if modes else TEXT)
    if not query.strip():
        return Search(query, mode=mode, modes=modes)
    try:
        body = {"query": query, "prefix": prefix or None, "limit": HITS, "mode": mode}
        return Search(query, await api.search(view, body), mode=mode, modes=modes)
    except (InvalidRequest, NoEmbedder) as error:
        return Search(query, error=error.message, mode=mode, modes=modes)


async def document(request: Request, signed: SignedIn) -> Response:
    """``/console/agents/{agent}/memory/{path}``: one document's text, metadata, version and size."""
    agent = path(request, "agent")
    if not path(request, "path"):  # .../memory/ is the listing
        return await memory(request, signed)
    found = await memory_api(request).read(admin_view(signed.caller, agent), path(request, "path"))
    return await context.shown(
        request,
        signed,
        "document.html",
        title=f"Document {found.path}",
        agent=agent,
        document=found,
        metadata=views.pretty_bytes(found.metadata),
        size=len(found.text.encode()),
    )


@dataclass(frozen=True, slots=True)
class Folder:
    """One end user's folder in one agent's memory, as a Session page shows it: its first documents,
    and whether there are more (then the page links to the agent's memory under that folder)."""

    agent: str
    user: str
    documents: list[DocumentHead]
    more: bool

    @property
    def prefix(self) -> str:
        return f"users/{self.user}/"


async def user_folders(request: Request, caller: Caller, user: str | None, agents: list[str]) -> dict[str, Folder]:
    """The folder of ``user`` in each agent's memory, by agent: for admins on a store with memory,
    when the session has an end user; else nothing."""
    api = memory_of(request)
    if api is None or user is None or not caller.is_admin:
        return {}
    folders = {}
    for agent in agents:
        view = admin_view(caller, agent, user)
        documents, more = await api.listing(view, f"users/{user}/", "", FOLDER_DOCUMENTS)
        folders[agent] = Folder(agent, user, documents, more is not None)
    return folders
