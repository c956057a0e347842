"""Search by meaning for keepstate's LangGraph stores: ``index={"dims", "embed", "fields"}`` as LangGraph's own.

A put embeds the texts at the index's ``fields`` (or the put's own ``index=[...]``; ``index=False``:
none; ``"$"``: the whole value as JSON), with LangGraph's ``get_text_at_path`` and the index's
``Embeddings``, before anything is written, and keeps the vectors inside the item's keepstate value
(``vectors``: unit float32 vectors, base64), so one atomic write holds the item and its vectors on
every keepstate backend, Redis too. A search with ``query=`` scores each item under the namespace
that passes the filter by the cosine similarity of its nearest vector (max pooling) and pages the
best; items without vectors follow, unscored, when a page has room (as ``InMemoryStore`` does).
An item's vectors are those of its current value: a put replaces them in the same write.
"""

from __future__ import annotations

import base64
import math
from array import array
from collections.abc import Sequence
from typing import Any

from langgraph.store.base import IndexConfig, PutOp, ensure_embeddings, get_text_at_path, tokenize_path

from keepstate.vectors import pack, similarities

Field = tuple[str, str | list[str]]
WHOLE = "$"


class Index:
    """An index configuration made ready: its embeddings and its fields, tokenized once."""

    def __init__(self, config: IndexConfig | dict[str, Any]) -> None:
        self.config: dict[str, Any] = dict(config)
        self.embeddings = ensure_embeddings(self.config.get("embed"))
        fields = self.config.get("fields") or self.config.get("text_fields") or [WHOLE]
        self.fields: list[Field] = [(path, path if path == WHOLE else tokenize_path(path)) for path in fields]

    def texts(self, op: PutOp) -> list[str]:
        """The texts of one put to embed: none for a delete or ``index=False``."""
        if op.value is None or op.index is False:
            return []
        fields = self.fields if op.index is None else [(path, tokenize_path(path)) for path in op.index]
        return [text for _, path in fields for text in get_text_at_path(op.value, path)]

    def plan(self, puts: Sequence[PutOp]) -> tuple[list[str], list[int]]:
        """Every put's texts in one list, and how many each put has."""
        texts = [self.texts(op) for op in puts]
        return [text for found in texts for text in found], [len(found) for found in texts]

    def stored(self, puts: Sequence[PutOp], counts: list[int], vectors: list[list[float]]) -> dict[int, str | None]:
        """What each put (by its index in ``puts``) keeps as ``vectors``: None when it has no text."""
        if len(vectors) != sum(counts):
            raise ValueError(f"the index's embeddings answered {len(vectors)} vectors for {sum(counts)} texts")
        kept: dict[int, str | None] = {}
        for index, count in enumerate(counts):
            mine, vectors = vectors[:count], vectors[count:]
            kept[index] = encode(mine) if mine else None
        return kept

    def embed(self, puts: Sequence[PutOp]) -> dict[int, str | None]:
        texts, counts = self.plan(puts)
        return self.stored(puts, counts, self.embeddings.embed_documents(texts) if texts else [])

    async def aembed(self, puts: Sequence[PutOp]) -> dict[int, str | None]:
        texts, counts = self.plan(puts)
        return self.stored(puts, counts, await self.embeddings.aembed_documents(texts) if texts else [])


def encode(vectors: list[list[float]]) -> str:
    """Unit float32 vectors, one after the other, as base64 text (a zero vector stays zero)."""
    return base64.b64encode(b"".join(pack(_unit(vector)) for vector in vectors)).decode()


def _unit(vector: Sequence[float]) -> array[float]:
    norm = math.sqrt(math.fsum(float(x) * float(x) for x in vector))
    return array("f", [float(x) / norm if norm else 0.0 for x in vector])


def best_score(query: Sequence[float], stored: str | None) -> float | None:
    """The cosine similarity of ``query`` and the nearest of an item's vectors; None without any."""
    if not stored:
        return None
    unit = _unit(query)
    data, width = base64.b64decode(stored), len(unit) * 4
    if width == 0 or len(data) % width:
        return None
    return max(similarities(unit, [data[start : start + width] for start in range(0, len(data), width)]))


def ranked(scored: list[tuple[float | None, Any]], offset: int, limit: int) -> list[tuple[float | None, Any]]:
    """The page ``offset``/``limit`` of items by score, best first; the unscored after, where room is left."""
    with_score = sorted((found for found in scored if found[0] is not None), key=lambda found: -(found[0] or 0.0))
    page = with_score[offset : offset + limit]
    unscored = [found for found in scored if found[0] is None]
    return page + unscored[: max(0, limit - len(page))] if len(page) < limit else page
