"""A document's passages: the pieces of its text that are embedded one by one, in pure Python.

Small embedding models read a few hundred words at most and blur a long text into one vague
vector, so a document is cut into passages of at most ``PASSAGE_CHARS`` characters, each embedded
on its own; a document is as near a query as its nearest passage, and a hit's snippet is that
passage. Cuts fall between paragraphs where they can, else after a sentence, else at a space, so a
passage reads as text. A passage is a span ``(start, stop)`` of the text: nothing is stored twice.
"""

from __future__ import annotations

import re

PASSAGE_CHARS = 800
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"[.!?;:]\s|\n")

Span = tuple[int, int]


def split_passages(text: str) -> list[Span]:
    """The passages of ``text`` in order, each without surrounding whitespace; none for a blank text."""
    spans: list[Span] = []
    for start, stop in _paragraphs(text):
        if spans and stop - spans[-1][0] <= PASSAGE_CHARS:
            spans[-1] = (spans[-1][0], stop)  # paragraphs that fit together stay together
        else:
            spans.extend(_cut(text, start, stop))
    return spans


def _paragraphs(text: str) -> list[Span]:
    found, start = [], 0
    for gap in _PARAGRAPH.finditer(text):
        found.append((start, gap.start()))
        start = gap.end()
    found.append((start, len(text)))
    return [span for span in (_trimmed(text, *span) for span in found) if span[1] > span[0]]


def _cut(text: str, start: int, stop: int) -> list[Span]:
    """One paragraph as passages of at most ``PASSAGE_CHARS``: after a sentence, else at a space."""
    spans = []
    while stop - start > PASSAGE_CHARS:
        limit = start + PASSAGE_CHARS
        window = text[start:limit]
        ends = [m.end() for m in _SENTENCE_END.finditer(window) if m.end() > PASSAGE_CHARS // 2]
        space = window.rfind(" ", PASSAGE_CHARS // 2)
        cut = start + (ends[-1] if ends else space if space > 0 else PASSAGE_CHARS)
        spans.append(_trimmed(text, start, cut))
        start = _trimmed(text, cut, stop)[0]
    spans.append((start, stop))
    return [span for span in spans if span[1] > span[0]]


def _trimmed(text: str, start: int, stop: int) -> Span:
    while start < stop and text[start].isspace():
        start += 1
    while stop > start and text[stop - 1].isspace():
        stop -= 1
    return start, stop
