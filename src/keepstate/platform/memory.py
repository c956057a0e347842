"""Memory for the server: a caller's view of an agent's memory and the API over the documents facet.

The rules (paths, folders, values, searches) are in ``keepstate.memory_rules``, shared with the
embedded store and the SDK.
"""

from __future__ import annotations

from typing import Any

from .. import embedding, memory_rules, values
from ..clock import now_ms
from ..embedders import Embedder
from ..errors import InvalidRequest, NotFound
from ..memory_rules import View, space_of
from ..scope import check_if_version
from ..stores.base import DocumentsFacet
from ..stores.documents import DocumentHead, DocumentWrite, StoredDocument, StoredHit
from .models import Caller
from .service import require


def run_view(caller: Caller) -> View:
    """What a run token reaches: its agent's memory, as its end user (or none)."""
    assert caller.run is not None
    return View(space_of(caller.run.env, caller.run.agent), caller.run.user)


def admin_view(caller: Caller, agent: str, user: str | None = None) -> View:
    """An admin's view of ``agent``'s memory: every folder, or as end user ``user``. Forbidden otherwise."""
    require(caller, "admin")
    if user is None:
        return View(space_of(caller.env, agent), None, every_folder=True)
    return View(space_of(caller.env, agent), values.check_key(user, "user"))


# ---------------------------------------------------------------- the API


class MemoryApi:
    """Memory over the documents facet for the server: each call resolves its paths through the view
    first, so nothing of a folder the view may not reach is ever read, written or searched. With an
    ``embedder``, a write stores its document's passages with it (an embedder's failure is logged and
    left to the retry: the document is kept) and searches may go by meaning (``keepstate.embedding``)."""

    def __init__(self, facet: DocumentsFacet, embedder: Embedder | None = None) -> None:
        self.facet = facet
        self.embedder = embedder

    async def read(self, view: View, path: str) -> StoredDocument:
        stored = memory_rules.document_path(view, path)
        found = await self.facet.read(view.space, stored)
        if found is None:
            raise NotFound(f"no document at {path[:600]}")
        return found

    async def write(self, view: View, path: str, body: dict[str, Any]) -> int:
        stored = memory_rules.document_path(view, path)
        if "text" not in body:
            raise InvalidRequest("text is required")
        text, metadata = memory_rules.check_text(body["text"]), memory_rules.check_metadata(body.get("metadata"))
        if_version = check_if_version(body.get("if_version"))
        return await embedding.write(
            self.facet, self.embedder, DocumentWrite(view.space, stored, text, metadata, if_version, now_ms())
        )

    async def delete(self, view: View, path: str, if_version: int | None) -> None:
        await self.facet.delete(view.space, memory_rules.document_path(view, path), if_version)

    async def listing(self, view: View, prefix: str, after: str, limit: int) -> tuple[list[DocumentHead], str | None]:
        where, cursor = memory_rules.listing_filter(view, prefix), memory_rules.check_after(after)
        heads = await self.facet.listing(view.space, where, cursor, limit)
        return heads, memory_rules.next_cursor(heads, limit)

    async def search(self, view: View, body: dict[str, Any]) -> list[StoredHit]:
        if "query" not in body:
            raise InvalidRequest("query is required")
        found = memory_rules.checked_search(
            view,
            body["query"],
            body.get("prefix"),
            body.get("limit"),
            body.get("mode"),
            body.get("filter"),
            self.embedder is not None,
        )
        return await embedding.search(self.facet, self.embedder, view.space, found)
