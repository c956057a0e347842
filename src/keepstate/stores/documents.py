"""The documents facet's records and the little every backend of it shares, free of I/O.

A document lives in a *space* (one agent's memory: ``env/agent``) at a full path, with UTF-8 text,
canonical JSON metadata bytes, a version and ``updated_at``. The facet knows nothing of end users:
what a caller may see is a ``PathFilter`` the platform hands it — paths under ``prefix``, except a
``hidden`` folder, except one ``allowed`` folder inside it — applied by each backend in the same
statement as the read, listing or search. Paths are ASCII, compared byte by byte (SQLite's BINARY,
PostgreSQL's ``"C"`` collation), so ``users/bob/`` and ``users/Bob/`` are two folders, never one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from .records import prefix_end

RECORDS_PAGE = 200
"""Documents an export reads at once (keyset-paged by space and path), so a big memory streams."""

SNIPPET_START, SNIPPET_END, SNIPPET_GAP = "**", "**", "…"
"""How every backend marks the matched words of a snippet, and text left out."""
SNIPPET_WORDS = 24
SNIPPET_SCAN = 16 * 1024
"""A snippet is made from at most this much of a document's text, so that what a search costs follows
what it returns, not the size of the documents it finds: around the first place a query word appears
in it (its start when none does). Memory documents are notes: most are far shorter than this."""
SNIPPET_WINDOW = (400, 2400)
"""Characters kept before the place a query word first appears, and in all, for a snippet made from a window."""
TITLE_WEIGHT = 10.0
"""How much more a match in a document's first line counts than one in the rest (SQLite, memory;
PostgreSQL's ``ts_rank_cd`` weighs its A and B labels 1.0 and 0.4)."""


@dataclass(frozen=True, slots=True)
class StoredDocument:
    path: str
    text: str
    metadata: bytes
    version: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class DocumentHead:
    """A listed document: no text, but its size (bytes of UTF-8), which the console shows."""

    path: str
    version: int
    updated_at: int
    size: int


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """A document as export and import move it: every field, and a tombstone (``text`` None) too, so
    that versions keep never repeating in the store it is imported into."""

    space: str
    path: str
    version: int
    text: str | None
    metadata: bytes
    updated_at: int

    @property
    def deleted(self) -> bool:
        return self.text is None


@dataclass(frozen=True, slots=True)
class StoredHit:
    """A search result: higher ``score`` is better; ``snippet`` is plain text around the matches."""

    path: str
    score: float
    snippet: str
    version: int


@dataclass(frozen=True, slots=True)
class PathFilter:
    """Paths starting with ``prefix``, except those under ``hidden`` that are not under ``allowed``;
    and, with ``metadata`` (canonical JSON of an object of scalars), only documents whose metadata
    has each of its top-level fields equal to the value given (a number equals the same number
    written as an integer or a float; ``true`` never equals ``1``)."""

    prefix: str = ""
    hidden: str | None = None
    allowed: str | None = None
    metadata: bytes | None = None

    def admits(self, path: str, metadata: bytes = b"{}") -> bool:
        if not path.startswith(self.prefix) or not self.admits_metadata(metadata):
            return False
        if self.hidden is None or not path.startswith(self.hidden):
            return True
        return self.allowed is not None and path.startswith(self.allowed)

    def admits_metadata(self, metadata: bytes) -> bool:
        if self.metadata is None:
            return True
        found = orjson.loads(metadata)
        return all(
            name in found and _same_scalar(found[name], value) for name, value in orjson.loads(self.metadata).items()
        )

    def sql_params(self) -> dict[str, Any]:
        """The bounds ``FILTER_SQL`` compares with: ranges, since paths compare byte by byte."""
        return {
            "prefix": self.prefix,
            "prefix_end": prefix_end(self.prefix),
            "hidden": self.hidden,
            "hidden_end": None if self.hidden is None else prefix_end(self.hidden),
            "allowed": self.allowed,
            "allowed_end": None if self.allowed is None else prefix_end(self.allowed),
            "metadata_filter": None if self.metadata is None else self.metadata.decode(),
        }


def _same_scalar(found: Any, wanted: Any) -> bool:
    """JSON equality of two values, the filter's a scalar: type and value (``1 == 1.0``, ``True != 1``)."""
    if isinstance(wanted, bool) or isinstance(found, bool):
        return found is wanted
    if isinstance(wanted, (int, float)):
        return isinstance(found, (int, float)) and found == wanted
    return bool(type(found) is type(wanted) and found == wanted)


@dataclass(frozen=True, slots=True)
class DocumentWrite:
    """The arguments of a facet's ``write``, as one value (``write_embedded`` takes it whole)."""

    space: str
    path: str
    text: str
    metadata: bytes
    if_version: int | None
    now: int

    @property
    def args(self) -> tuple[str, str, str, bytes, int | None, int]:
        return self.space, self.path, self.text, self.metadata, self.if_version, self.now


@dataclass(frozen=True, slots=True)
class StoredPassage:
    """One embedded passage of a document: its span of the text and its unit vector's bytes
    (``keepstate.vectors``)."""

    start: int
    stop: int
    vector: bytes


@dataclass(frozen=True, slots=True)
class Unembedded:
    """A live document whose passages are not those of the current embedder: to embed."""

    space: str
    path: str
    version: int
    text: str


def passage_snippet(text: str, start: int, stop: int) -> str:
    """A semantic hit's snippet: its nearest passage, on one line."""
    return one_line(text[start:stop])


def filter_sql(column: str, param: str) -> str:
    """The ``PathFilter`` as a condition on ``column``, with named placeholders in ``param`` style
    (``":{}"`` for SQLite, ``"%({})s"`` for psycopg)."""
    p = {
        name: param.format(name) for name in ("prefix", "prefix_end", "hidden", "hidden_end", "allowed", "allowed_end")
    }
    return (
        f"{column} >= {p['prefix']} AND {column} < {p['prefix_end']} AND ({p['hidden']} IS NULL "
        f"OR {column} < {p['hidden']} OR {column} >= {p['hidden_end']} "
        f"OR ({p['allowed']} IS NOT NULL AND {column} >= {p['allowed']} AND {column} < {p['allowed_end']}))"
    )


_SPACES = re.compile(r"\s+")


def one_line(snippet: str) -> str:
    """A snippet as one line: every run of whitespace (line breaks too) a single space."""
    return _SPACES.sub(" ", snippet).strip()


def split_title(text: str) -> tuple[str, str | None]:
    """The first line (the title-like part, weighted higher) and the rest; None when there is no newline,
    so that ``join_title`` gives the text back exactly."""
    title, newline, body = text.partition("\n")
    return title, body if newline else None


def join_title(title: str, body: str | None) -> str:
    return title if body is None else f"{title}\n{body}"
