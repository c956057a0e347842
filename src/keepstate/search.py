"""Memory's search syntax: words and ``"quoted phrases"``, parsed once, in pure Python.

A query is whitespace-separated words, optionally with ``"quoted phrases"``; a document matches when
it holds every word and every phrase (each in any inflection its engine's stemmer knows). Nothing
else is syntax: ``AND``, ``-x``, ``*``, ``NEAR(…)``, ``title:`` are plain words and punctuation, so a
query can never reach an engine as an expression. The parse gives each backend a ``Query`` of
``Term``s and the backend builds its engine's query from those alone: SQLite quotes each term as an
FTS5 string, PostgreSQL hands each to ``plainto_tsquery``/``phraseto_tsquery`` as a bound parameter,
the in-process store compares stems. A malformed query (an unclosed quote, an empty phrase, no word
at all, too long) is ``InvalidRequest``.

Common English words (``the``, ``of``, ``is`` …) are dropped from bare words here, for every backend,
so a question typed in full still finds the documents holding its meaningful words (PostgreSQL's
English configuration drops its own list too). Inside a phrase they stay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidRequest

MAX_QUERY_CHARS = 1000
MAX_TERMS = 32
WORD = re.compile(r"[^\W_]+")
"""A word: a run of letters and digits, as SQLite's ``unicode61`` and PostgreSQL's parser split text."""

_STOP_WORDS_TEXT = """
a about above after again against all am an and any are as at be because been before being below between
both but by can could did do does doing don down during each few for from further had has have having he
her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor
not now of off on once only or other our ours ourselves out over own same she should so some such t than
that the their theirs them themselves then there these they this those through to too under until up very
was we were what when where which while who whom why will with would you your yours yourself yourselves
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())


@dataclass(frozen=True, slots=True)
class Term:
    """One thing a document must hold: ``text`` as the user wrote it (one bare word or a phrase's
    inside) and its ``words``, lower case. A bare word of several words (``e-mail``) is matched as
    the engines match it: those words in a row."""

    text: str
    words: tuple[str, ...]
    phrase: bool


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed query. No terms (every word was a stop word) matches nothing."""

    terms: tuple[Term, ...]

    @property
    def bare(self) -> tuple[Term, ...]:
        return tuple(term for term in self.terms if not term.phrase)

    @property
    def phrases(self) -> tuple[Term, ...]:
        return tuple(term for term in self.terms if term.phrase)


def parse_query(text: object) -> Query:
    """The ``Query`` of a search string; InvalidRequest, saying what is wrong, when it is malformed."""
    text = check_query_text(text)
    parts = text.split('"')
    if len(parts) % 2 == 0:
        raise InvalidRequest('query has an unclosed quote: write phrases as "two words"')
    terms: list[Term] = []
    for index, part in enumerate(parts):
        terms.extend(_phrase(part) if index % 2 else _bare_words(part))
    if not terms and not any(WORD.search(part) for part in parts):
        raise InvalidRequest("query has no words to search for")
    unique = tuple(dict.fromkeys(term for term in terms if term.words))
    if len(unique) > MAX_TERMS:
        raise InvalidRequest(f"query has {len(unique)} words and phrases, over the limit of {MAX_TERMS}")
    return Query(unique)


def check_query_text(text: object) -> str:
    """A query as text, whatever it searches by: a string of at most ``MAX_QUERY_CHARS`` characters,
    without U+0000 or lone surrogates; InvalidRequest otherwise."""
    if not isinstance(text, str):
        raise InvalidRequest("query must be a string")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidRequest(f"query is {len(text)} characters, over the limit of {MAX_QUERY_CHARS}")
    if "\x00" in text or not _encodable(text):
        raise InvalidRequest("query holds U+0000 or a lone surrogate")
    return text


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bare_words(part: str) -> list[Term]:
    found = []
    for token in part.split():
        words = tuple(WORD.findall(token.lower()))
        if words and not all(word in STOP_WORDS for word in words):
            found.append(Term(token, words, phrase=False))
    return found


def _phrase(part: str) -> list[Term]:
    words = tuple(WORD.findall(part.lower()))
    if not words:
        raise InvalidRequest('query has an empty phrase: write phrases as "two words"')
    return [Term(part.strip(), words, phrase=len(words) > 1)]
