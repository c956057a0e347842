"""An agent's memory: the five calls, on any store, embedded or over HTTP; search by words or meaning.

As with state scopes (``keepstate.scope``), ``Memory`` holds what does not depend on where the
documents live (paging a listing, defaults) over a small ``MemoryOps`` object doing the primitive
calls: straight on a store (``StoreMemoryOps``, here, with the rules of ``keepstate.platform.memory``)
or over HTTP with a run token or a key (``keepstate.client.memory_calls``). ``AsyncMemory`` is the
same over awaitable ops. Paths, the ``users/{user}/`` folder, the search syntax: docs/memory.md.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from . import embedding
from .clock import now_ms
from .embedders import Embedder
from .errors import NotFound
from .memory_rules import (
    View,
    check_after,
    check_metadata,
    check_text,
    checked_search,
    document_path,
    listing_filter,
    next_cursor,
)
from .scope import check_if_version
from .stores.base import SyncDocumentsFacet
from .stores.documents import DocumentWrite, StoredDocument

PAGE = 100


@dataclass(frozen=True, slots=True)
class Document:
    """A document as read: its full path (a user's folder named), text, metadata, version, last write (ms)."""

    path: str
    text: str
    metadata: dict[str, Any]
    version: int
    updated_at: int

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Document:
        return cls(
            str(data["path"]),
            str(data["text"]),
            dict(data.get("metadata") or {}),
            int(data["version"]),
            int(data["updated_at"]),
        )


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    """A listed document: path, version, last write (ms)."""

    path: str
    version: int
    updated_at: int

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DocumentInfo:
        return cls(str(data["path"]), int(data["version"]), int(data["updated_at"]))


@dataclass(frozen=True, slots=True)
class Hit:
    """A search result: higher ``score`` is better. By words, ``snippet`` is text around the matches,
    each matched word between ``**``; by meaning, ``score`` is the cosine similarity and ``snippet``
    the nearest passage; fused (``hybrid``), ``score`` is the reciprocal-rank sum."""

    path: str
    score: float
    snippet: str
    version: int

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hit:
        return cls(str(data["path"]), float(data["score"]), str(data["snippet"]), int(data["version"]))


ListPage = tuple[list[DocumentInfo], str | None]


class MemoryOps(Protocol):
    def read(self, path: str) -> Document | None: ...
    def write(self, path: str, text: str, metadata: dict[str, Any] | None, if_version: int | None) -> int: ...
    def delete(self, path: str, if_version: int | None) -> None: ...
    def list_page(self, prefix: str, after: str, limit: int) -> ListPage: ...
    def search(
        self, query: str, prefix: str | None, limit: int, mode: str | None, filter: dict[str, Any] | None
    ) -> list[Hit]: ...


class AsyncMemoryOps(Protocol):
    async def read(self, path: str) -> Document | None: ...
    async def write(self, path: str, text: str, metadata: dict[str, Any] | None, if_version: int | None) -> int: ...
    async def delete(self, path: str, if_version: int | None) -> None: ...
    async def list_page(self, prefix: str, after: str, limit: int) -> ListPage: ...
    async def search(
        self, query: str, prefix: str | None, limit: int, mode: str | None, filter: dict[str, Any] | None
    ) -> list[Hit]: ...


class Memory:
    """One agent's memory as one run (or one end user) sees it: ``read``, ``write``, ``delete``,
    ``list``, ``search``. ``users/{user}/…`` is the end user's own folder."""

    def __init__(self, ops: MemoryOps) -> None:
        self._ops = ops

    def read(self, path: str) -> Document | None:
        """The document at ``path``, or None when there is none (or it is in another user's folder)."""
        return self._ops.read(path)

    def write(self, path: str, text: str, metadata: dict[str, Any] | None = None, if_version: int | None = None) -> int:
        """Replace the document's text and metadata; the new version. ``if_version=0``: only if absent.
        Raises VersionConflict (with ``current_version``), TooLarge past 1 MiB of text or 16 KiB of metadata."""
        return self._ops.write(path, text, metadata, if_version)

    def delete(self, path: str, if_version: int | None = None) -> None:
        """Delete the document (nothing happens when there is none); VersionConflict on a mismatch."""
        self._ops.delete(path, if_version)

    def list(self, prefix: str = "") -> Iterator[DocumentInfo]:
        """Every document whose path starts with ``prefix``, in path order, fetched page by page."""
        after: str | None = ""
        while after is not None:
            page, after = self._ops.list_page(prefix, after, PAGE)
            yield from page

    def search(
        self,
        query: str,
        mode: str | None = None,
        filter: dict[str, Any] | None = None,
        prefix: str | None = None,
        limit: int = 10,
    ) -> builtins.list[Hit]:
        """The best documents for ``query``, best first (at most ``limit``, ≤ 50). ``mode``: ``"text"``,
        the documents holding every word and ``"quoted phrase"`` (a first line that holds them ranks
        above a passing mention); ``"semantic"``, the documents nearest in meaning (``score`` the
        cosine similarity of their nearest passage, which is the ``snippet``); ``"hybrid"``, both fused
        by reciprocal rank. Default: hybrid with an embedder, else text; meaning without an embedder is
        NoEmbedder. ``filter``: only documents whose metadata has each of these fields with this value.
        InvalidRequest for a malformed query."""
        return self._ops.search(query, prefix, limit, mode, filter)


class AsyncMemory:
    """``Memory`` for async code: the same calls, awaited."""

    def __init__(self, ops: AsyncMemoryOps) -> None:
        self._ops = ops

    async def read(self, path: str) -> Document | None:
        return await self._ops.read(path)

    async def write(
        self, path: str, text: str, metadata: dict[str, Any] | None = None, if_version: int | None = None
    ) -> int:
        return await self._ops.write(path, text, metadata, if_version)

    async def delete(self, path: str, if_version: int | None = None) -> None:
        await self._ops.delete(path, if_version)

    async def list(self, prefix: str = "") -> AsyncIterator[DocumentInfo]:
        after: str | None = ""
        while after is not None:
            page, after = await self._ops.list_page(prefix, after, PAGE)
            for item in page:
                yield item

    async def search(
        self,
        query: str,
        mode: str | None = None,
        filter: dict[str, Any] | None = None,
        prefix: str | None = None,
        limit: int = 10,
    ) -> builtins.list[Hit]:
        return await self._ops.search(query, prefix, limit, mode, filter)


def document_of(stored: StoredDocument) -> Document:
    return Document(stored.path, stored.text, orjson.loads(stored.metadata), stored.version, stored.updated_at)


class StoreMemoryOps(MemoryOps):
    """``MemoryOps`` straight on a store's sync documents facet, under the same rules as the server.

    The facet is asked for at each call, so that an agent on a store without documents (Redis) fails
    only when it touches its memory, with the reason, and a closed store says so (``StoreClosed``)."""

    def __init__(self, facet: Callable[[], SyncDocumentsFacet], view: View, embedder: Embedder | None = None) -> None:
        self._facet_of = facet
        self.view = view
        self.embedder = embedder

    @property
    def facet(self) -> SyncDocumentsFacet:
        return self._facet_of()

    def read(self, path: str) -> Document | None:
        """None when absent, and for another user's folder, which is absent for this view (as a 404 is)."""
        try:
            stored = document_path(self.view, path)
        except NotFound:
            return None
        found = self.facet.read(self.view.space, stored)
        return None if found is None else document_of(found)

    def write(self, path: str, text: str, metadata: dict[str, Any] | None, if_version: int | None) -> int:
        stored = document_path(self.view, path)
        data, guard = check_metadata(metadata), check_if_version(if_version)
        written = DocumentWrite(self.view.space, stored, check_text(text), data, guard, now_ms())
        return embedding.write_sync(self.facet, self.embedder, written)

    def delete(self, path: str, if_version: int | None) -> None:
        self.facet.delete(self.view.space, document_path(self.view, path), check_if_version(if_version))

    def list_page(self, prefix: str, after: str, limit: int) -> ListPage:
        where, cursor = listing_filter(self.view, prefix), check_after(after)
        heads = self.facet.listing(self.view.space, where, cursor, limit)
        return [DocumentInfo(h.path, h.version, h.updated_at) for h in heads], next_cursor(heads, limit)

    def search(
        self, query: str, prefix: str | None, limit: int, mode: str | None, filter: dict[str, Any] | None
    ) -> list[Hit]:
        found = checked_search(self.view, query, prefix, limit, mode, filter, self.embedder is not None)
        hits = embedding.search_sync(self.facet, self.embedder, self.view.space, found)
        return [Hit(h.path, h.score, h.snippet, h.version) for h in hits]


class InlineAsyncMemoryOps(AsyncMemoryOps):
    """Sync ops behind an awaitable face, for async agents on an in-process store (``keepstate.testing``)."""

    def __init__(self, ops: MemoryOps) -> None:
        self._ops = ops

    async def read(self, path: str) -> Document | None:
        return self._ops.read(path)

    async def write(self, path: str, text: str, metadata: dict[str, Any] | None, if_version: int | None) -> int:
        return self._ops.write(path, text, metadata, if_version)

    async def delete(self, path: str, if_version: int | None) -> None:
        self._ops.delete(path, if_version)

    async def list_page(self, prefix: str, after: str, limit: int) -> ListPage:
        return self._ops.list_page(prefix, after, limit)

    async def search(
        self, query: str, prefix: str | None, limit: int, mode: str | None, filter: dict[str, Any] | None
    ) -> list[Hit]:
        return self._ops.search(query, prefix, limit, mode, filter)


__all__ = ["AsyncMemory", "Document", "DocumentInfo", "Hit", "Memory"]
