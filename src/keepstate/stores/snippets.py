"""Snippets made in Python: up to ``SNIPPET_WORDS`` words around the first match, matched words
marked, cuts shown as ``…`` — the same shape as SQLite's ``snippet()`` and PostgreSQL's ``ts_headline``.

The in-process store makes every snippet here, from the first ``SNIPPET_SCAN`` characters of a
document as the other stores do. SQLite makes here those of documents too long for
FTS5's ``snippet()``, which tokenizes a whole text however little of it shows (a search of big
documents would cost the size of what it found, not of what it returns): from a bounded window of
the text instead (``stores/sqlite/documents.py``). Words are matched by a light English stem
(``stem``), applied to documents and queries alike. No I/O.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .documents import SNIPPET_END, SNIPPET_GAP, SNIPPET_START, SNIPPET_WORDS, one_line

WORD = re.compile(r"[^\W_]+")
_VOWELS = set("aeiouy")
Terms = Sequence[tuple[str, ...]]
"""A query's terms as runs of stems: a bare word is a run of one, a phrase a run of its words."""


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


def terms_of(words: Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
    """The stems of each term's words."""
    return [tuple(stem(word) for word in term) for term in words]


@dataclass(frozen=True, slots=True)
class Field:
    """One part of a document (its first line, or the rest) as words: their stems and their spans."""

    text: str
    stems: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, text: str) -> Field:
        found = list(WORD.finditer(text))
        return cls(text, tuple(stem(m.group()) for m in found), tuple(m.span() for m in found))

    def head(self, limit: int) -> Field:
        """The words that end within the first ``limit`` characters (a snippet looks no further)."""
        kept = bisect.bisect_right([stop for _, stop in self.spans], limit)
        return Field(self.text[:limit], self.stems[:kept], self.spans[:kept])

    def positions(self, stems: tuple[str, ...]) -> list[int]:
        """Where the run of ``stems`` starts, each time it occurs."""
        size = len(stems)
        return [i for i in range(len(self.stems) - size + 1) if self.stems[i : i + size] == stems]


def snippet(title: Field, body: Field, terms: Terms, cut: tuple[bool, bool] = (False, False)) -> str:
    """The snippet of a document whose first line is ``title`` and rest ``body`` (or a window of the
    rest, ``cut`` before and after it): from the title when a term is in it, else from the body."""
    if any(title.positions(stems) for stems in terms):
        return _around(title, terms, (False, False))
    return _around(body, terms, cut)


def _around(part: Field, terms: Terms, cut: tuple[bool, bool]) -> str:
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
            pieces.append(part.text[stop : part.spans[index + 1][0]])
    lead = SNIPPET_GAP if start > 0 or cut[0] else part.text[: part.spans[start][0]]
    tail = SNIPPET_GAP if end < len(part.spans) or cut[1] else part.text[part.spans[end - 1][1] :]
    return one_line(lead + "".join(pieces) + tail)


def _marked(part: Field, terms: Terms) -> Iterator[int]:
    for stems in terms:
        for position in part.positions(stems):
            yield from range(position, position + len(stems))
