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

from .records import prefix_end

RECORDS_PAGE = 200
"""Documents an export reads at once (keyset-paged by space and path), so a big memory streams."""

SNIPPET_START, SNIPPET_END, SNIPPET_GAP = "**", "**", "…"
"""How every backend marks the matched words of a snippet, and text left out."""
SNIPPET_WORDS = 24
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
    """Paths starting with ``prefix``, except those under ``hidden`` that are not under ``allowed``."""

    prefix: str = ""
    hidden: str | None = None
    allowed: str | None = None

    def admits(self, path: str) -> bool:
        if not path.startswith(self.prefix):
            return False
        if self.hidden is None or not path.startswith(self.hidden):
            return True
        return self.allowed is not None and path.startswith(self.allowed)

    def sql_params(self) -> dict[str, Any]:
        """The bounds ``FILTER_SQL`` compares with: ranges, since paths compare byte by byte."""
        return {
            "prefix": self.prefix, "prefix_end": prefix_end(self.prefix),
            "hidden": self.hidden, "hidden_end": None if self.hidden is None else prefix_end(self.hidden),
            "allowed": self.allowed, "allowed_end": None if self.allowed is None else prefix_end(self.allowed),
        }


def filter_sql(column: str, param: str) -> str:
    """The ``PathFilter`` as a condition on ``column``, with named placeholders in ``param`` style
    (``":{}"`` for SQLite, ``"%({})s"`` for psycopg)."""
    p = {name: param.format(name) for name in ("prefix", "prefix_end", "hidden", "hidden_end", "allowed",
                                               "allowed_end")}
    return (f"{column} >= {p['prefix']} AND {column} < {p['prefix_end']} AND ({p['hidden']} IS NULL "
            f"OR {column} < {p['hidden']} OR {column} >= {p['hidden_end']} "
            f"OR ({p['allowed']} IS NOT NULL AND {column} >= {p['allowed']} AND {column} < {p['allowed_end']}))")


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
