"""The documents facet on PostgreSQL: one table with a generated ``tsvector`` column and a GIN index on it.

``memory_documents`` holds one row per (space, path), paths in the ``"C"`` collation (byte order,
case-sensitive), a tombstone keeping the version of a deleted document. Its ``tsv`` column is
computed by PostgreSQL itself from the text, the first line labelled ``A`` and the rest ``B``
(English configuration: stems, stop words), so the index can never disagree with the text; the
GIN index on it answers ``tsv @@ query`` without reading the table.

Search: ``ts_rank_cd`` (A weighs 1.0, B 0.4) over the matching rows of the space that the
``PathFilter`` admits, the best ``limit`` of them picked in a subquery, and ``ts_headline`` run on
those alone, over a bounded window of each text (it re-parses what it is given, the costly part).
The tsquery is built in SQL from bound parameters only: the bare words through ``plainto_tsquery``
and each phrase through ``phraseto_tsquery``, joined with ``&&``; no user text is ever tsquery
syntax. The statement is never
prepared: PostgreSQL's generic plan for it (psycopg prepares a statement after five runs) cannot see
the path bounds and ANDs the GIN scan with a scan of the primary key over the whole space, so its
cost grew with the memory (measured: 2.5 ms against 5-11 ms at 30,000-100,000 documents).

A text PostgreSQL cannot index (a ``tsvector`` holds at most 1 MiB, which ~1 MiB of distinct
words passes) is refused with ``TooLarge``, nothing written.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...errors import TooLarge, VersionConflict
from ...search import Query
from ..base import DocumentsFacet
from ..documents import (
    RECORDS_PAGE,
    SNIPPET_END,
    SNIPPET_GAP,
    SNIPPET_SCAN,
    SNIPPET_START,
    SNIPPET_WINDOW,
    SNIPPET_WORDS,
    DocumentHead,
    DocumentRecord,
    DocumentWrite,
    PathFilter,
    StoredDocument,
    StoredHit,
    StoredPassage,
    filter_sql,
    one_line,
)
from . import passages
from .db import aconnection, version_guard

try:
    import psycopg
    import psycopg_pool
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

COMPONENT = "documents"
_FIRST_LINE = "split_part(text, E'\\n', 1)"
STEPS = (
    f"""
    CREATE TABLE memory_documents (
        space      TEXT COLLATE "C" NOT NULL,
        path       TEXT COLLATE "C" NOT NULL,
        version    BIGINT NOT NULL,
        live       BOOLEAN NOT NULL,
        text       TEXT,
        metadata   BYTEA,
        updated_at BIGINT NOT NULL,
        tsv        TSVECTOR GENERATED ALWAYS AS (
            setweight(to_tsvector('english', coalesce({_FIRST_LINE}, '')), 'A')
            || setweight(to_tsvector('english', coalesce(substr(text, length({_FIRST_LINE}) + 2), '')), 'B')
        ) STORED,
        PRIMARY KEY (space, path)
    );
    CREATE INDEX memory_documents_search ON memory_documents USING GIN (tsv);
    """,
    # 2: no write takes a version past the highest one (``records.version_limit``)
    version_guard("memory_documents"),
    # 3: semantic search: passages and their vectors (``passages``)
    passages.STEP,
)

READ = "SELECT text, metadata, version, updated_at FROM memory_documents WHERE space = %s AND path = %s AND live"
CURRENT = "SELECT CASE WHEN live THEN version ELSE 0 END FROM memory_documents WHERE space = %s AND path = %s"
_UPSERT = """INSERT INTO memory_documents AS d (space, path, version, live, text, metadata, updated_at)
    VALUES (%(space)s, %(path)s, 1, true, %(text)s, %(metadata)s, %(now)s)
    ON CONFLICT (space, path) DO UPDATE SET version = d.version + 1, live = true, text = excluded.text,
        metadata = excluded.metadata, updated_at = excluded.updated_at {guard}
    RETURNING d.version"""
WRITE_ANY = _UPSERT.format(guard="")
WRITE_ABSENT = _UPSERT.format(guard="WHERE NOT d.live")
WRITE_IF = """UPDATE memory_documents SET version = version + 1, text = %(text)s, metadata = %(metadata)s,
    updated_at = %(now)s WHERE space = %(space)s AND path = %(path)s AND live AND version = %(if_version)s
    RETURNING version"""
DELETE = """UPDATE memory_documents SET live = false, text = NULL, metadata = NULL
    WHERE space = %(space)s AND path = %(path)s AND live
        AND (%(if_version)s::bigint IS NULL OR version = %(if_version)s) RETURNING version"""
_WHERE = (
    f"d.space = %(space)s AND d.live AND {filter_sql('d.path', '%({})s::text')} "
    f"AND {passages.metadata_sql('d.metadata')}"
)
LIST = f"""SELECT d.path, d.version, d.updated_at, octet_length(d.text) FROM memory_documents d
    WHERE {_WHERE} AND d.path > %(after)s ORDER BY d.path LIMIT %(limit)s"""
RECORDS = """SELECT space, path, version, live, text, metadata, updated_at FROM memory_documents
    WHERE (space, path) > (%s, %s) ORDER BY space, path LIMIT %s"""
RESTORE = """INSERT INTO memory_documents (space, path, version, live, text, metadata, updated_at)
    VALUES (%(space)s, %(path)s, %(version)s, %(live)s, %(text)s, %(metadata)s, %(updated_at)s)
    ON CONFLICT (space, path) DO UPDATE SET version = excluded.version, live = excluded.live, text = excluded.text,
        metadata = excluded.metadata, updated_at = excluded.updated_at"""
_HEADLINE = (
    f"StartSel={SNIPPET_START}, StopSel={SNIPPET_END}, MaxWords={SNIPPET_WORDS}, MinWords=12, "
    f'ShortWord=2, MaxFragments=1, FragmentDelimiter=" {SNIPPET_GAP} "'
)
_SEARCH = """WITH q AS (SELECT {tsquery} AS query, (SELECT lexeme FROM unnest(to_tsvector('english', %(words)s))
        ORDER BY length(lexeme) DESC, lexeme LIMIT 1) AS anchor),
    top AS (
        SELECT d.path, d.version, ts_rank_cd(d.tsv, q.query) AS score FROM memory_documents d, q
        WHERE d.tsv @@ q.query AND {where} ORDER BY score DESC, d.path LIMIT %(limit)s
    ),
    part AS (
        SELECT top.*, left(d.text, %(scan)s) AS head FROM top
        JOIN memory_documents d ON d.space = %(space)s AND d.path = top.path
    )
    SELECT part.path, part.version, part.score, ts_headline('english',
        substr(part.head, greatest(strpos(lower(part.head), coalesce(q.anchor, '')) - %(lead)s, 1), %(window)s),
        q.query, %(headline)s)
    FROM part, q ORDER BY part.score DESC, part.path"""
"""The best ``limit`` documents, and a headline of each made from a bounded window of its text:
``ts_headline`` re-parses all the text it is given (measured: 3.1 s for 50 hits of 1 MB documents
against 1.5 ms for small ones), so it is given ``WINDOW_CHARS`` only, from a little before the first
place the query's longest stem appears in the document's first ``SNIPPET_SCAN`` characters (its
start when it does not). ``left()`` decompresses and reads only that much of a stored text: a search
costs what it returns, whatever the size of the documents it finds."""
LEAD_CHARS, WINDOW_CHARS = SNIPPET_WINDOW
SEARCHES_AT_ONCE = 4
"""Searches of one Database running at once; more wait their turn here, so that many slow searches
(long phrases over common words) never hold every pooled connection, nor all of the database's CPU
that the state reads and writes of the same server need."""


def tsquery_sql(query: Query) -> tuple[str, dict[str, str]]:
    """The tsquery of a parsed query as SQL over named parameters, and those parameters."""
    parts, params = [], {}
    if query.bare:
        parts.append("plainto_tsquery('english', %(bare)s)")
        params["bare"] = " ".join(term.text for term in query.bare)
    for index, term in enumerate(query.phrases):
        parts.append(f"phraseto_tsquery('english', %(phrase{index})s)")
        params[f"phrase{index}"] = term.text
    return " && ".join(parts), params


def _write_statement(written: DocumentWrite) -> tuple[str, dict[str, Any]]:
    params = {
        "space": written.space,
        "path": written.path,
        "text": written.text,
        "metadata": written.metadata,
        "now": written.now,
        "if_version": written.if_version,
    }
    guard = written.if_version
    return (WRITE_ANY if guard is None else WRITE_ABSENT if guard == 0 else WRITE_IF), params


@contextmanager
def _indexable() -> Iterator[None]:
    """PostgreSQL refusing to index a text (a ``tsvector`` over 1 MiB) as TooLarge: nothing was written."""
    try:
        yield
    except psycopg.errors.ProgramLimitExceeded as error:
        raise TooLarge(f"the text has too many distinct words for PostgreSQL to index ({error})") from None


def _document(path: str, row: Any) -> StoredDocument | None:
    if row is None:
        return None
    text, metadata, version, updated_at = row
    return StoredDocument(path, text, bytes(metadata), int(version), int(updated_at))


class PostgresDocuments(passages.PostgresPassages, DocumentsFacet):
    """The documents facet on one PostgreSQL database (the URL's schema, via search_path)."""

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool) -> None:
        self.pool = pool
        self._searching = asyncio.Semaphore(SEARCHES_AT_ONCE)

    async def read(self, space: str, path: str) -> StoredDocument | None:
        async with aconnection(self.pool) as conn:
            return _document(path, await (await conn.execute(READ, (space, path))).fetchone())

    async def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int:
        written = DocumentWrite(space, path, text, metadata, if_version, now)
        async with aconnection(self.pool) as conn:
            with _indexable():
                row = await (await conn.execute(*_write_statement(written))).fetchone()
            return await self._version(conn, written, row)

    async def write_embedded(self, written: DocumentWrite, key: str, passages: Sequence[StoredPassage]) -> int:
        """The write and its passages in one transaction, sent as one pipeline: one round trip."""
        schema = await self._prepared(passages)
        async with aconnection(self.pool) as conn, conn.transaction():
            with _indexable():
                async with conn.pipeline():
                    cursor = await conn.execute(*_write_statement(written))
                    await self._attach_on(conn, schema, written.space, written.path, None, key, passages)
            return await self._version(conn, written, await cursor.fetchone())

    async def _version(self, conn: psycopg.AsyncConnection[Any], written: DocumentWrite, row: Any) -> int:
        """The version a write's statement returned; VersionConflict when its guard refused it (and the
        transaction it is in rolls back)."""
        if row is None:
            raise VersionConflict(current_version=await self._current(conn, written.space, written.path))
        return int(row[0])

    async def delete(self, space: str, path: str, if_version: int | None) -> bool:
        async with aconnection(self.pool) as conn:
            row = await (
                await conn.execute(DELETE, {"space": space, "path": path, "if_version": if_version})
            ).fetchone()
            if row is not None:
                return True
            current = await self._current(conn, space, path)
        if if_version is not None and current != if_version:
            raise VersionConflict(current_version=current)
        return False

    @staticmethod
    async def _current(conn: psycopg.AsyncConnection[Any], space: str, path: str) -> int:
        row = await (await conn.execute(CURRENT, (space, path))).fetchone()
        return 0 if row is None else int(row[0])

    async def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
        params = {"space": space, "after": after, "limit": limit, **where.sql_params()}
        async with aconnection(self.pool) as conn:
            rows = await (await conn.execute(LIST, params)).fetchall()
        return [DocumentHead(str(p), int(v), int(u), int(s)) for p, v, u, s in rows]

    async def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
        if not query.terms:
            return []
        tsquery, terms = tsquery_sql(query)
        sql = _SEARCH.format(tsquery=tsquery, where=_WHERE)
        params = {
            "space": space,
            "limit": limit,
            "headline": _HEADLINE,
            "words": " ".join(term.text for term in query.terms),
            "scan": SNIPPET_SCAN,
            "lead": LEAD_CHARS,
            "window": WINDOW_CHARS,
            **terms,
            **where.sql_params(),
        }
        async with self._searching, aconnection(self.pool) as conn:
            rows = await (await conn.execute(sql, params, prepare=False)).fetchall()
        return [StoredHit(str(p), float(score), one_line(str(snippet)), int(v)) for p, v, score, snippet in rows]

    async def records(self) -> AsyncIterator[DocumentRecord]:
        """Keyset-paged by (space, path), one short statement per page: no transaction is held open
        while the export writes its lines."""
        after = ("", "")
        while True:
            async with aconnection(self.pool) as conn:
                rows = await (await conn.execute(RECORDS, (*after, RECORDS_PAGE))).fetchall()
            for space, path, version, live, text, metadata, updated_at in rows:
                yield DocumentRecord(
                    str(space),
                    str(path),
                    int(version),
                    str(text) if live else None,
                    bytes(metadata) if live else b"{}",
                    int(updated_at),
                )
            if len(rows) < RECORDS_PAGE:
                return
            after = (str(rows[-1][0]), str(rows[-1][1]))

    async def restore(self, record: DocumentRecord) -> None:
        params = {
            "space": record.space,
            "path": record.path,
            "version": record.version,
            "live": not record.deleted,
            "text": record.text,
            "metadata": None if record.deleted else record.metadata,
            "updated_at": record.updated_at,
        }
        async with aconnection(self.pool) as conn:
            with _indexable():
                await conn.execute(RESTORE, params)
