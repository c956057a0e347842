"""Embedding memory's documents: as each is written, and later for those left behind.

A write embeds the document's passages first and stores the document and its passages in one
transaction (one commit); an embedder that fails (down, slow, out of quota) never loses a document:
it is stored alone, searchable by words, and embedded later, by ``keepstate memory reindex`` or by
the server's background retry (``EmbeddingRetry``), which record passages with ``attach``, guarded
by the version they were made from, so a document rewritten meanwhile never gets the vectors of its
old text. Searches run here too: one ranking per mode, fused for ``hybrid`` (``keepstate.semantic``).
Writes and searches have a sync twin for the embedded store, which has no event loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .embedders import Embedder
from .errors import KeepstateError
from .passages import split_passages
from .semantic import SEMANTIC, TEXT, depth, fuse, stored_passages
from .stores.base import DocumentsFacet, SyncDocumentsFacet
from .stores.documents import DocumentWrite, StoredHit, Unembedded

if TYPE_CHECKING:
    from .memory_rules import Search

log = logging.getLogger("keepstate.memory")
BATCH = 16
"""Documents embedded in one call of the embedder by a reindex."""
RETRY_S = 30.0
"""How often a server looks for documents that were written but could not be embedded."""


def _texts(documents: list[Unembedded]) -> tuple[list[list[tuple[int, int]]], list[str]]:
    spans = [split_passages(document.text) for document in documents]
    texts = [document.text[a:b] for document, found in zip(documents, spans, strict=True) for a, b in found]
    return spans, texts


async def embed_documents(facet: DocumentsFacet, embedder: Embedder, documents: list[Unembedded]) -> int:
    """Embed ``documents`` in one call of the embedder and record their passages; how many were recorded
    (one rewritten meanwhile is not). Unavailable when the embedder fails."""
    spans, texts = _texts(documents)
    vectors = await embedder.apassages(texts)
    key = await embedder.acurrent_key()
    recorded = 0
    for document, found in zip(documents, spans, strict=True):
        mine, vectors = vectors[: len(found)], vectors[len(found) :]
        passages = stored_passages(found, mine)
        recorded += await facet.attach(document.space, document.path, document.version, key, passages)
    return recorded


def unembedded_warning(space: str, path: str, error: KeepstateError) -> None:
    log.warning(
        "memory: %s/%s is stored and searchable by words, not yet by meaning (%s): "
        "it is embedded later (keepstate memory reindex, or the server's retry)",
        space,
        path,
        error.message,
    )


async def write(facet: DocumentsFacet, embedder: Embedder | None, written: DocumentWrite) -> int:
    """Store a document, with its passages when ``embedder`` embeds them (one commit); the new version.
    When the embedder fails, the document alone: nothing of it is lost."""
    if embedder is None:
        return await facet.write(*written.args)
    spans = split_passages(written.text)
    try:
        vectors = await embedder.apassages([written.text[a:b] for a, b in spans])
        key = await embedder.acurrent_key()
    except KeepstateError as error:
        unembedded_warning(written.space, written.path, error)
        return await facet.write(*written.args)
    return await facet.write_embedded(written, key, stored_passages(spans, vectors))


def write_sync(facet: SyncDocumentsFacet, embedder: Embedder | None, written: DocumentWrite) -> int:
    """``write`` for the embedded store."""
    if embedder is None:
        return facet.write(*written.args)
    spans = split_passages(written.text)
    try:
        vectors = embedder.passages([written.text[a:b] for a, b in spans])
        key = embedder.current_key()
    except KeepstateError as error:
        unembedded_warning(written.space, written.path, error)
        return facet.write(*written.args)
    return facet.write_embedded(written, key, stored_passages(spans, vectors))


async def reindex(
    facet: DocumentsFacet,
    embedder: Embedder,
    space: str | None = None,
    missing_only: bool = False,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Embed every live document not embedded with the current embedder (``missing_only``: never
    embedded), of ``space`` or of every one, ``BATCH`` at a time in (space, path) order; how many
    were recorded. Unavailable, after the batches before, when the embedder fails."""
    key = None if missing_only else await embedder.acurrent_key()
    after, recorded = ("", ""), 0
    while page := await facet.unembedded(key, space, after, BATCH):
        recorded += await embed_documents(facet, embedder, page)
        after = (page[-1].space, page[-1].path)
        if progress is not None:
            progress(len(page))
    return recorded


async def search(facet: DocumentsFacet, embedder: Embedder | None, space: str, found: Search) -> list[StoredHit]:
    """The hits of a checked search: one ranking per mode, fused for ``hybrid``."""
    asked = depth(found.mode, found.limit)
    rankings = []
    if found.mode != SEMANTIC:
        rankings.append(await facet.search(space, found.query, found.where, asked))
    if found.mode != TEXT:
        assert embedder is not None
        vector = await embedder.aquery(found.text)
        rankings.append(await facet.nearest(space, embedder.key_of(vector), vector, found.where, asked))
    return rankings[0] if len(rankings) == 1 else fuse(rankings, found.limit)


def search_sync(facet: SyncDocumentsFacet, embedder: Embedder | None, space: str, found: Search) -> list[StoredHit]:
    """``search`` for the embedded store."""
    asked = depth(found.mode, found.limit)
    rankings = []
    if found.mode != SEMANTIC:
        rankings.append(facet.search(space, found.query, found.where, asked))
    if found.mode != TEXT:
        assert embedder is not None
        vector = embedder.query(found.text)
        rankings.append(facet.nearest(space, embedder.key_of(vector), vector, found.where, asked))
    return rankings[0] if len(rankings) == 1 else fuse(rankings, found.limit)


class EmbeddingRetry:
    """A server's background task: every ``every`` seconds, embed the documents written while the
    embedder was failing. Several servers on one store may do it at once: ``attach`` makes that harmless."""

    def __init__(self, facet: DocumentsFacet, embedder: Embedder, every: float = RETRY_S) -> None:
        self.facet, self.embedder, self.every = facet, embedder, every
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="keepstate-embedding-retry")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                done = await reindex(self.facet, self.embedder, missing_only=True)
            except KeepstateError as error:
                log.warning("memory: embedding the documents left behind failed, tried again later: %s", error.message)
            else:
                if done:
                    log.info("memory: embedded %d documents left behind", done)
