"""The documents facet in memory: a dict per space and a plain scan for search, as the spec allows.

No index: a search reads every document of the space, which is fine for tests and one-process apps
and is what the in-process store is for (SQLite and PostgreSQL search an index). Each document is
split into words once, when written, with a light English stemmer (plurals, ``-ing``, ``-ed``, a
final ``e``), so ``running`` finds ``runs`` here as it does on the real engines. Ranking is BM25
over the space, a first-line match counting ``TITLE_WEIGHT`` times a match in the rest.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...errors import VersionConflict
from ...search import Query
from ..documents import (
    SNIPPET_END,
    SNIPPET_GAP,
    SNIPPET_START,
    SNIPPET_WORDS,
    TITLE_WEIGHT,
    DocumentHead,
    DocumentRecord,
    PathFilter,
    StoredDocument,
    StoredHit,
    one_line,
    split_title,
)

_WORD = re.compile(r"[^\W_]+")
_VOWELS = set("aeiouy")
K1, B = 1.2, 0.75


def stem(word: str) -> str:
    """A light English stem: the same for ``run``, ``runs``, ``running``; ``index``, ``indexed``,
    ``indexing``; ``make``, ``making``. Not Porter's, but applied to documents and queries alike."""
    word = word.lower()
    if len(word) <= 3:
        return word
    if word.endswith("ies"):
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        base = word[: -len(suffix)]
        if word.endswith(suffix) and len(base) >= 3 and _VOWELS & set(base):
            word = base[:-1] if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "aeioulsz" else base
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


@dataclass(frozen=True, slots=True)
class _Field:
    """One part of a document (its first line, or the rest) as words: their stems and their spans."""

    text: str
    stems: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, text: str) -> _Field:
        found = list(_WORD.finditer(text))
        return cls(text, tuple(stem(m.group()) for m in found), tuple(m.span() for m in found))

    def positions(self, stems: tuple[str, ...]) -> list[int]:
        """Where the run of ``stems`` starts, each time it occurs."""
        size = len(stems)
        return [i for i in range(len(self.stems) - size + 1) if self.stems[i:i + size] == stems]


@dataclass(slots=True)
class _Doc:
    version: int
    text: str | None = None
    metadata: bytes = b"{}"
    updated_at: int = 0
    title: _Field | None = None
    body: _Field | None = None
    size: int = 0

    @property
    def live(self) -> bool:
        return self.text is not None


@dataclass
class MemoryDocuments:
    """Every space's documents behind one lock: each operation is trivially linearizable."""

    spaces: dict[str, dict[str, _Doc]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, space: str, path: str) -> StoredDocument | None:
        with self.lock:
            doc = self.spaces.get(space, {}).get(path)
            if doc is None or doc.text is None:
                return None
            return StoredDocument(path, doc.text, doc.metadata, doc.version, doc.updated_at)

    def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int:
        title, body = split_title(text)
        fields = _Field.of(title), _Field.of(body or "")
        with self.lock:
            doc = self._checked(space, path, if_version)
            doc.version += 1
            doc.text, doc.metadata, doc.updated_at = text, metadata, now
            doc.title, doc.body, doc.size = *fields, _size(text)
            return doc.version

    def delete(self, space: str, path: str, if_version: int | None) -> bool:
        with self.lock:
            doc = self._checked(space, path, if_version)
            was_live = doc.live
            doc.text, doc.title, doc.body = None, None, None
            return was_live

    def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
        with self.lock:
            found = [DocumentHead(path, doc.version, doc.updated_at, doc.size)
                     for path, doc in self.spaces.get(space, {}).items()
                     if doc.live and path > after and where.admits(path)]
        found.sort(key=lambda head: head.path)
        return found[:limit]

    def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
        if not query.terms:
            return []
        with self.lock:
            docs = [(path, doc) for path, doc in self.spaces.get(space, {}).items() if doc.live and where.admits(path)]
        terms = [tuple(stem(word) for word in term.words) for term in query.terms]
        ranking = _Bm25([doc for _, doc in docs], terms)
        scored = [(score, path, doc) for path, doc in docs if (score := ranking.score(doc)) is not None]
        scored.sort(key=lambda found: (-found[0], found[1]))
        return [StoredHit(path, score, _snippet(doc, terms), doc.version) for score, path, doc in scored[:limit]]

    def records(self) -> Iterator[DocumentRecord]:
        with self.lock:
            found = [DocumentRecord(space, path, doc.version, doc.text, doc.metadata if doc.live else b"{}",
                                    doc.updated_at)
                     for space, docs in self.spaces.items() for path, doc in docs.items() if doc.version]
        return iter(sorted(found, key=lambda record: (record.space, record.path)))

    def restore(self, record: DocumentRecord) -> None:
        doc = _Doc(record.version, record.text, record.metadata, record.updated_at)
        if record.text is not None:
            title, body = split_title(record.text)
            doc.title, doc.body, doc.size = _Field.of(title), _Field.of(body or ""), _size(record.text)
        with self.lock:
            self.spaces.setdefault(record.space, {})[record.path] = doc

    def _checked(self, space: str, path: str, if_version: int | None) -> _Doc:
        doc = self.spaces.setdefault(space, {}).setdefault(path, _Doc(0))
        current = doc.version if doc.live else 0
        if if_version is not None and if_version != current:
            raise VersionConflict(current_version=current)
        return doc


def _size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _fields(doc: _Doc) -> tuple[_Field, _Field]:
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
    """Up to ``SNIPPET_WORDS`` words around the first match, matched words marked, cuts shown as ``…``."""
    title, body = _fields(doc)
    part = title if any(title.positions(stems) for stems in terms) else body
    marked = set(_marked(part, terms))
    first = min(marked, default=0)
    start = max(0, min(first - SNIPPET_WORDS // 4, len(part.spans) - SNIPPET_WORDS))
    end = min(len(part.spans), start + SNIPPET_WORDS)
    if start >= end:
        return one_line(part.text[:200])
    pieces = []
    for index in range(start, end):
        begin, stop = part.spans[index]
        word = part.text[begin:stop]
        opens = index in marked and (index == start or index - 1 not in marked)
        closes = index in marked and (index == end - 1 or index + 1 not in marked)
        pieces.append((SNIPPET_START if opens else "") + word + (SNIPPET_END if closes else ""))
        if index + 1 < end:
            pieces.append(part.text[stop:part.spans[index + 1][0]])
    lead = SNIPPET_GAP if start > 0 else part.text[:part.spans[start][0]]
    tail = SNIPPET_GAP if end < len(part.spans) else part.text[part.spans[end - 1][1]:]
    return one_line(lead + "".join(pieces) + tail)


def _marked(part: _Field, terms: list[tuple[str, ...]]) -> Iterator[int]:
    for stems in terms:
        for position in part.positions(stems):
            yield from range(position, position + len(stems))

