"""Search by meaning: the modes, the filter, passages ready to store, and the fusion of two rankings; no I/O.

A search has a ``mode``: ``text`` (words, the store's full-text engine), ``semantic`` (the documents
whose nearest passage is nearest the query's vector) or ``hybrid`` (both, fused by reciprocal rank:
a document's score is the sum over the two rankings of ``1 / (RRF_K + rank)``, so one found by both
comes first, and neither ranking's scale matters). Without a mode, a memory with an embedder
searches ``hybrid``, one without ``text``; asking for meaning without an embedder is ``NoEmbedder``.
"""

from __future__ import annotations

from array import array
from typing import Any

from . import values
from .errors import InvalidRequest, InvalidValue, NoEmbedder
from .passages import Span
from .stores.documents import StoredHit, StoredPassage
from .vectors import pack

TEXT, SEMANTIC, HYBRID = "text", "semantic", "hybrid"
MODES = (TEXT, SEMANTIC, HYBRID)
RRF_K = 60
FUSED_DEPTH = 50
"""How deep each ranking is read before two are fused."""
MAX_FILTER_FIELDS = 32
NO_EMBEDDER = "this memory has no embedder: search with mode text, or configure one (keepstate serve --embedder)"


def check_mode(mode: object, has_embedder: bool) -> str:
    """The mode a search runs in; InvalidRequest for an unknown one, NoEmbedder for meaning without an embedder."""
    if mode is None:
        return HYBRID if has_embedder else TEXT
    if mode not in MODES:
        raise InvalidRequest("mode must be text, semantic or hybrid")
    if mode != TEXT and not has_embedder:
        raise NoEmbedder(NO_EMBEDDER)
    return str(mode)


def check_filter(found: object) -> bytes | None:
    """A search's ``filter`` as canonical JSON: an object whose values are strings, numbers, booleans or
    null, each a top-level field a document's metadata must hold with that value; None when absent."""
    if found is None:
        return None
    if not isinstance(found, dict):
        raise InvalidRequest("filter must be an object of metadata fields and the values they must have")
    if len(found) > MAX_FILTER_FIELDS:
        raise InvalidRequest(f"filter has {len(found)} fields, over the limit of {MAX_FILTER_FIELDS}")
    for name, value in found.items():
        if not isinstance(name, str) or not name or '"' in name or "\\" in name:
            raise InvalidRequest('filter fields are names without " or \\')
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise InvalidRequest(f"filter field {name[:80]!r}: values are strings, numbers, booleans or null")
    try:
        return values.encode(found)
    except InvalidValue as error:
        raise InvalidValue(error.message, path="$.filter" + error.path[1:]) from None


def stored_passages(spans: list[Span], vectors: list[array[float]]) -> list[StoredPassage]:
    return [StoredPassage(start, stop, pack(vector)) for (start, stop), vector in zip(spans, vectors, strict=True)]


def fuse(rankings: list[list[StoredHit]], limit: int) -> list[StoredHit]:
    """Reciprocal-rank fusion of ``rankings`` (each best first): the ``limit`` best by summed
    ``1 / (RRF_K + rank)``, ties in path order; each hit's snippet from the first ranking that has it
    (put the words' first: their snippets mark the matched words)."""
    scores: dict[str, float] = {}
    first: dict[str, StoredHit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.path] = scores.get(hit.path, 0.0) + 1.0 / (RRF_K + rank)
            first.setdefault(hit.path, hit)
    best = sorted(scores, key=lambda path: (-scores[path], path))[:limit]
    return [StoredHit(path, scores[path], first[path].snippet, first[path].version) for path in best]


def depth(mode: str, limit: int) -> int:
    """How many hits each ranking of ``mode`` is asked for."""
    return max(limit, FUSED_DEPTH) if mode == HYBRID else limit


def describe(hits: list[StoredHit]) -> list[dict[str, Any]]:
    return [{"path": h.path, "score": h.score, "snippet": h.snippet, "version": h.version} for h in hits]
