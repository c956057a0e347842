"""The documents facet in memory: a dict per space and a plain scan for search, as the spec allows.

No index: a search reads every document of the space, which is fine for tests and one-process apps
and is what the in-process store is for (SQLite and PostgreSQL search an index). Each document is
split into words once, when written, with a light English stemmer (plurals, ``-ing``, ``-ed``, a
final ``e``), so ``running`` finds ``runs`` here as it does on the real engines. Ranking is BM25
over the space, a first-line match counting ``TITLE_WEIGHT`` times a match in the rest.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ...errors import VersionConflict
from ...search import Query
from ...values import MAX_VERSION
from ...vectors import nearest_documents
from ..documents import (
    SNIPPET_SCAN,
    TITLE_WEIGHT,
    DocumentHead,
    DocumentRecord,
    DocumentWrite,
    PathFilter,
    StoredDocument,
    StoredHit,
    StoredPassage,
    Unembedded,
    passage_snippet,
    split_title,
)
from ..records import version_limit
from ..snippets import Field, snippet, terms_of

K1, B = 1.2, 0.75


@dataclass(slots=True)
class _Doc:
    version: int
    text: str | None = None
    metadata: bytes = b"{}"
    updated_at: int = 0
    title: Field | None = None
    body: Field | None = None
    size: int = 0
    embedding: str | None = None
    passages: tuple[StoredPassage, ...] = ()

    @property
    def live(self) -> bool:
        return self.text is not None


@dataclass
class MemoryDocuments:
    """Every space's documents behind one lock: each operation is trivially linearizable."""

    spaces: dict[str, dict[str, _Doc]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def read(self, space: str, path: str) -> StoredDocument | None:
        with self.lock:
            doc = self.spaces.get(space, {}).get(path)
            if doc is None or doc.text is None:
                return None
            return StoredDocument(path, doc.text, doc.metadata, doc.version, doc.updated_at)

    def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int:
        title, body = split_title(text)
        fields = Field.of(title), Field.of(body or "")
        with self.lock:
            doc = self._checked(space, path, if_version)
            if doc.version >= MAX_VERSION:
                raise version_limit()
            doc.version += 1
            doc.text, doc.metadata, doc.updated_at = text, metadata, now
            doc.title, doc.body, doc.size = *fields, _size(text)
            doc.embedding, doc.passages = None, ()
            return doc.version

    def delete(self, space: str, path: str, if_version: int | None) -> bool:
        with self.lock:
            doc = self._checked(space, path, if_version)
            was_live = doc.live
            doc.text, doc.title, doc.body = None, None, None
            doc.embedding, doc.passages = None, ()
            return was_live

    def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
        with self.lock:
            found = [
                DocumentHead(path, doc.version, doc.updated_at, doc.size)
                for path, doc in self.spaces.get(space, {}).items()
                if doc.live and path > after and where.admits(path, doc.metadata)
            ]
        found.sort(key=lambda head: head.path)
        return found[:limit]

    def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
        if not query.terms:
            return []
        with self.lock:
            docs = [
                (path, doc)
                for path, doc in self.spaces.get(space, {}).items()
                if doc.live and where.admits(path, doc.metadata)
            ]
        terms = terms_of([term.words for term in query.terms])
        ranking = _Bm25([doc for _, doc in docs], terms)
        scored = [(score, path, doc) for path, doc in docs if (score := ranking.score(doc)) is not None]
        scored.sort(key=lambda found: (-found[0], found[1]))
        return [StoredHit(path, score, _snippet(doc, terms), doc.version) for score, path, doc in scored[:limit]]

    def records(self) -> Iterator[DocumentRecord]:
        with self.lock:
            found = [
                DocumentRecord(space, path, doc.version, doc.text, doc.metadata if doc.live else b"{}", doc.updated_at)
                for space, docs in self.spaces.items()
                for path, doc in docs.items()
                if doc.version
            ]
        return iter(sorted(found, key=lambda record: (record.space, record.path)))

    def restore(self, record: DocumentRecord) -> None:
        doc = _Doc(record.version, record.text, record.metadata, record.updated_at)
        if record.text is not None:
            title, body = split_title(record.text)
            doc.title, doc.body, doc.size = Field.of(title), Field.of(body or ""), _size(record.text)
        with self.lock:
            self.spaces.setdefault(record.space, {})[record.path] = doc

    def nearest(self, space: str, key: str, vector: array[float], where: PathFilter, limit: int) -> list[StoredHit]:
        """An exact scan of the passages of the space's documents embedded with ``key``."""
        with self.lock:
            docs = sorted(
                (path, doc)
                for path, doc in self.spaces.get(space, {}).items()
                if doc.live and doc.embedding == key and where.admits(path, doc.metadata)
            )
        rows = [(path, (doc, passage), passage.vector) for path, doc in docs for passage in doc.passages]
        return [
            StoredHit(path, score, passage_snippet(doc.text or "", passage.start, passage.stop), doc.version)
            for path, (doc, passage), score in nearest_documents(vector, rows, limit)
        ]

    def write_embedded(self, written: DocumentWrite, key: str, passages: Sequence[StoredPassage]) -> int:
        with self.lock:  # reentrant: the write and its passages are one step
            version = self.write(*written.args)
            self.attach(written.space, written.path, version, key, passages)
            return version

    def attach(self, space: str, path: str, version: int, key: str, passages: Sequence[StoredPassage]) -> bool:
        with self.lock:
            doc = self.spaces.get(space, {}).get(path)
            if doc is None or not doc.live or doc.version != version:
                return False
            doc.embedding, doc.passages = key, tuple(passages)
            return True

    def unembedded(self, key: str | None, space: str | None, after: tuple[str, str], limit: int) -> list[Unembedded]:
        with self.lock:
            found = [
                Unembedded(name, path, doc.version, doc.text)
                for name, docs in self.spaces.items()
                if space is None or name == space
                for path, doc in docs.items()
                if doc.text is not None and (name, path) > after and _pending(doc.embedding, key)
            ]
        found.sort(key=lambda item: (item.space, item.path))
        return found[:limit]

    def embedding_counts(self, key: str, space: str | None) -> tuple[int, int]:
        with self.lock:
            live = [
                doc for name, docs in self.spaces.items() if space is None or name == space for doc in docs.values()
            ]
            live = [doc for doc in live if doc.live]
        return sum(1 for doc in live if doc.embedding == key), len(live)

    def _checked(self, space: str, path: str, if_version: int | None) -> _Doc:
        doc = self.spaces.setdefault(space, {}).setdefault(path, _Doc(0))
        current = doc.version if doc.live else 0
        if if_version is not None and if_version != current:
            raise VersionConflict(current_version=current)
        return doc


def _pending(embedding: str | None, key: str | None) -> bool:
    """Whether a document embedded with ``embedding`` is to embed: never embedded (``key`` None), or
    not with ``key``."""
    return embedding is None if key is None else embedding != key


def _size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _fields(doc: _Doc) -> tuple[Field, Field]:
    assert doc.title is not None and doc.body is not None
    return doc.title, doc.body


class _Bm25:
    """BM25 of ``terms`` over the documents searched: a term's rarity among them, a document's length."""

    def __init__(self, docs: list[_Doc], terms: list[tuple[str, ...]]) -> None:
        self.terms = terms
        lengths = [_length(doc) for doc in docs]
        self.average = (sum(lengths) / len(lengths) if lengths else 0.0) or 1.0
        self.idf = []
        for stems in terms:
            holding = sum(1 for doc in docs if any(part.positions(stems) for part in _fields(doc)))
            self.idf.append(math.log(1 + (len(docs) - holding + 0.5) / (holding + 0.5)))

    def score(self, doc: _Doc) -> float | None:
        """None unless ``doc`` holds every term."""
        title, body = _fields(doc)
        norm = K1 * (1 - B + B * _length(doc) / self.average)
        total = 0.0
        for stems, idf in zip(self.terms, self.idf, strict=True):
            frequency = TITLE_WEIGHT * len(title.positions(stems)) + len(body.positions(stems))
            if frequency == 0:
                return None
            total += idf * frequency * (K1 + 1) / (frequency + norm)
        return total


def _length(doc: _Doc) -> int:
    title, body = _fields(doc)
    return len(title.stems) + len(body.stems)


def _snippet(doc: _Doc, terms: list[tuple[str, ...]]) -> str:
    """From the document's first ``SNIPPET_SCAN`` characters, as every store makes its snippets."""
    title, body = _fields(doc)
    return snippet(title.head(SNIPPET_SCAN), body.head(SNIPPET_SCAN), terms, (False, len(body.text) > SNIPPET_SCAN))
