"""Vectors as stored, and the exact scan that ranks them, free of I/O.

A passage's vector is stored as its unit-length float32 values, packed little-endian (4 bytes a
dimension): the same bytes in a SQLite blob, a PostgreSQL ``bytea`` and in memory. With unit
vectors, cosine similarity is a dot product. ``nearest_documents`` is the exact scan every backend
without a vector index uses: every candidate passage scored, each document as near as its nearest
passage. It uses numpy when it is installed (the ``keepstate[embed]`` extra brings it: ~100× faster),
else plain Python, with the same answer.
"""

from __future__ import annotations

import heapq
import sys
from array import array
from collections.abc import Sequence
from typing import Any, TypeVar

K = TypeVar("K", bound=str)

try:  # pragma: no cover - depends on the install
    import numpy

    HAS_NUMPY = True
except ImportError:  # pragma: no cover
    HAS_NUMPY = False


def pack(vector: array[float]) -> bytes:
    """A vector's stored bytes: float32, little-endian."""
    if sys.byteorder == "little":
        return vector.tobytes()
    swapped = array("f", vector)  # pragma: no cover - big-endian machines
    swapped.byteswap()  # pragma: no cover
    return swapped.tobytes()  # pragma: no cover


def unpack(data: bytes) -> array[float]:
    vector = array("f")
    vector.frombytes(data)
    if sys.byteorder != "little":  # pragma: no cover
        vector.byteswap()
    return vector


def similarities(query: array[float], blobs: Sequence[bytes]) -> list[float]:
    """The dot product of ``query`` with each stored vector (cosine: all are unit length); a stored
    vector of another length scores -1, as unrelated as can be."""
    dims = len(query) * 4
    if HAS_NUMPY and blobs:
        same = [blob if len(blob) == dims else bytes(dims) for blob in blobs]
        matrix = numpy.frombuffer(b"".join(same), dtype="<f4").reshape(len(same), len(query))
        scores: list[float] = (matrix @ numpy.asarray(query, dtype="<f4")).tolist()
        return [score if len(blob) == dims else -1.0 for score, blob in zip(scores, blobs, strict=True)]
    return [_dot(query, unpack(blob)) if len(blob) == dims else -1.0 for blob in blobs]


def _dot(a: array[float], b: array[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def nearest_documents(
    query: array[float], rows: Sequence[tuple[K, Any, bytes]], limit: int
) -> list[tuple[K, Any, float]]:
    """The ``limit`` documents nearest ``query``, nearest first: ``rows`` are (document, passage,
    vector bytes), and each document (its path) comes back once, with its nearest passage and that
    similarity. Ties go in path order."""
    best: dict[K, tuple[float, Any]] = {}
    for (document, passage, _), score in zip(rows, similarities(query, [row[2] for row in rows]), strict=True):
        found = best.get(document)
        if found is None or score > found[0]:
            best[document] = (score, passage)
    top = heapq.nsmallest(limit, best.items(), key=lambda item: (-item[1][0], item[0]))
    return [(document, passage, score) for document, (score, passage) in top]
