"""The documents facet on SQLite: a table of documents and an FTS5 index over it, kept in step by triggers.

Layout. ``keepstate_documents`` holds one row per (space, path): its version, whether it is live
(a deleted document leaves a tombstone keeping its version, so versions never repeat), its
metadata, and its text split in two columns, the first line (``title``) and the rest (``body``,
NULL when the text has no newline). ``keepstate_documents_fts`` is an *external-content* FTS5
table over those two columns (``porter unicode61``: case folded, diacritics removed, English
stems), so the text is stored once and ``snippet()`` reads it from the documents table. Triggers
index a row when it is written and take its old words out (FTS5's ``delete`` with the old values)
when it changes, in the same transaction as the write.

Search ranks with ``bm25()`` weighing the first line ``TITLE_WEIGHT`` times the rest, keeps only
rows of the space that the ``PathFilter`` admits (one statement with the match), and computes
snippets only for the hits returned. The match expression is built from the parsed ``Query``: each
term is one FTS5 string (``"…"``, inner quotes doubled), so no user text is ever FTS5 syntax.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any

from ...errors import VersionConflict
from ...search import Query
from ..base import DocumentsFacet
from ..documents import (
    RECORDS_PAGE,
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
    filter_sql,
    join_title,
    one_line,
    split_title,
)
from .db import SqliteFile

COMPONENT = "documents"
STEPS = [
    """
    CREATE TABLE keepstate_documents (
        id INTEGER PRIMARY KEY,
        space TEXT NOT NULL,
        path TEXT NOT NULL,
        version INTEGER NOT NULL,
        live INTEGER NOT NULL,
        title TEXT,
        body TEXT,
        metadata BLOB,
        updated_at INTEGER NOT NULL,
        UNIQUE (space, path)
    );
    CREATE VIRTUAL TABLE keepstate_documents_fts USING fts5(
        title, body, content='keepstate_documents', content_rowid='id', tokenize='porter unicode61'
    );
    CREATE TRIGGER keepstate_documents_index AFTER INSERT ON keepstate_documents BEGIN
        INSERT INTO keepstate_documents_fts (rowid, title, body) VALUES (new.id, new.title, new.body);
    END;
    CREATE TRIGGER keepstate_documents_reindex AFTER UPDATE OF title, body ON keepstate_documents BEGIN
        INSERT INTO keepstate_documents_fts (keepstate_documents_fts, rowid, title, body)
            VALUES ('delete', old.id, old.title, old.body);
        INSERT INTO keepstate_documents_fts (rowid, title, body) VALUES (new.id, new.title, new.body);
    END;
    CREATE TRIGGER keepstate_documents_unindex AFTER DELETE ON keepstate_documents BEGIN
        INSERT INTO keepstate_documents_fts (keepstate_documents_fts, rowid, title, body)
            VALUES ('delete', old.id, old.title, old.body);
    END;
    """,
]

_READ = ("SELECT title, body, metadata, version, updated_at FROM keepstate_documents "
         "WHERE space = ? AND path = ? AND live = 1")
_CURRENT = "SELECT version, live FROM keepstate_documents WHERE space = ? AND path = ?"
_UPSERT = (
    "INSERT INTO keepstate_documents (space, path, version, live, title, body, metadata, updated_at) "
    "VALUES (:space, :path, 1, 1, :title, :body, :metadata, :now) "
    "ON CONFLICT (space, path) DO UPDATE SET version = version + 1, live = 1, title = excluded.title, "
    "body = excluded.body, metadata = excluded.metadata, updated_at = excluded.updated_at {guard} "
    "RETURNING version"
)
_WRITE_ANY = _UPSERT.format(guard="")
_WRITE_ABSENT = _UPSERT.format(guard="WHERE live = 0")
_WRITE_IF = (
    "UPDATE keepstate_documents SET version = version + 1, title = :title, body = :body, metadata = :metadata, "
    "updated_at = :now WHERE space = :space AND path = :path AND live = 1 AND version = :if_version RETURNING version"
)
_DELETE = ("UPDATE keepstate_documents SET live = 0, title = NULL, body = NULL, metadata = NULL "
           "WHERE space = ? AND path = ? AND live = 1 RETURNING version")


def _where(table: str) -> str:
    """Live rows of the space that the ``PathFilter`` admits (its bounds as named parameters)."""
    return f"{table}.space = :space AND {table}.live = 1 AND {filter_sql(f'{table}.path', ':{}')}"


_SIZE = "length(CAST(title AS BLOB)) + coalesce(length(CAST(body AS BLOB)) + 1, 0)"
"""A document's bytes of UTF-8: its first line, and the rest after the newline."""
_LIST = (f"SELECT path, version, updated_at, {_SIZE} FROM keepstate_documents WHERE {_where('keepstate_documents')} "
         "AND path > :after "
         "ORDER BY path LIMIT :limit")
_RANK = f"bm25(keepstate_documents_fts, {TITLE_WEIGHT}, 1.0)"
_SEARCH = (
    f"SELECT d.id, d.path, d.version, {_RANK} AS rank FROM keepstate_documents_fts "
    "JOIN keepstate_documents AS d ON d.id = keepstate_documents_fts.rowid "
    f"WHERE keepstate_documents_fts MATCH :match AND {_where('d')} "
    "ORDER BY rank, d.path LIMIT :limit"
)
_SNIPPET = (
    f"SELECT snippet(keepstate_documents_fts, -1, '{SNIPPET_START}', '{SNIPPET_END}', '{SNIPPET_GAP}', "
    f"{SNIPPET_WORDS}) FROM keepstate_documents_fts WHERE keepstate_documents_fts MATCH ? AND rowid = ?"
)


_RECORDS = ("SELECT space, path, version, live, title, body, metadata, updated_at FROM keepstate_documents "
            "WHERE (space, path) > (?, ?) ORDER BY space, path LIMIT ?")
_RESTORE = (
    "INSERT INTO keepstate_documents (space, path, version, live, title, body, metadata, updated_at) "
    "VALUES (:space, :path, :version, :live, :title, :body, :metadata, :updated_at) "
    "ON CONFLICT (space, path) DO UPDATE SET version = excluded.version, live = excluded.live, "
    "title = excluded.title, body = excluded.body, metadata = excluded.metadata, updated_at = excluded.updated_at"
)


def match_expression(query: Query) -> str:
    """The FTS5 expression of a parsed query: every term one quoted string, all of them required."""
    return " ".join('"' + term.text.replace('"', '""') + '"' for term in query.terms)


def _current(conn: sqlite3.Connection, space: str, path: str) -> int:
    row = conn.execute(_CURRENT, (space, path)).fetchone()
    return 0 if row is None or not row[1] else int(row[0])


def _read(conn: sqlite3.Connection, space: str, path: str) -> StoredDocument | None:
    row = conn.execute(_READ, (space, path)).fetchone()
    if row is None:
        return None
    title, body, metadata, version, updated_at = row
    return StoredDocument(path, join_title(title, body), bytes(metadata), int(version), int(updated_at))


def _write(conn: sqlite3.Connection, space: str, path: str, text: str, metadata: bytes, if_version: int | None,
           now: int) -> int:
    title, body = split_title(text)
    params: dict[str, Any] = {"space": space, "path": path, "title": title, "body": body, "metadata": metadata,
                              "now": now, "if_version": if_version}
    sql = _WRITE_ANY if if_version is None else _WRITE_ABSENT if if_version == 0 else _WRITE_IF
    row = conn.execute(sql, params).fetchone()
    if row is None:
        raise VersionConflict(current_version=_current(conn, space, path))
    return int(row[0])


def _delete(conn: sqlite3.Connection, space: str, path: str, if_version: int | None) -> bool:
    if if_version is not None:
        current = _current(conn, space, path)
        if current != if_version:
            raise VersionConflict(current_version=current)
    return conn.execute(_DELETE, (space, path)).fetchone() is not None


def _list(conn: sqlite3.Connection, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
    params = {"space": space, "after": after, "limit": limit, **where.sql_params()}
    return [DocumentHead(str(p), int(v), int(u), int(s)) for p, v, u, s in conn.execute(_LIST, params)]


def _search(conn: sqlite3.Connection, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
    """The best ``limit`` rows by bm25 in one statement, then a snippet for each of those only."""
    if not query.terms:
        return []
    match = match_expression(query)
    params = {"space": space, "match": match, "limit": limit, **where.sql_params()}
    rows = conn.execute(_SEARCH, params).fetchall()
    hits = []
    for rowid, path, version, rank in rows:
        snippet = conn.execute(_SNIPPET, (match, rowid)).fetchone()
        text = str(snippet[0] or "") if snippet else ""
        hits.append(StoredHit(str(path), -float(rank), one_line(text), int(version)))
    return hits


def _records(conn: sqlite3.Connection, after: tuple[str, str]) -> list[DocumentRecord]:
    """The next ``RECORDS_PAGE`` documents after ``(space, path)``, tombstones included."""
    return [DocumentRecord(str(space), str(path), int(version), join_title(title, body) if live else None,
                           bytes(metadata) if live else b"{}", int(updated_at))
            for space, path, version, live, title, body, metadata, updated_at
            in conn.execute(_RECORDS, (*after, RECORDS_PAGE))]


def _restore(conn: sqlite3.Connection, record: DocumentRecord) -> None:
    title, body = (None, None) if record.text is None else split_title(record.text)
    conn.execute(_RESTORE, {"space": record.space, "path": record.path, "version": record.version,
                            "live": int(not record.deleted), "title": title, "body": body,
                            "metadata": None if record.deleted else record.metadata,
                            "updated_at": record.updated_at})


class SqliteDocuments:
    """The sync face: each write one ``BEGIN IMMEDIATE`` transaction on the caller's thread."""

    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        db.migrate(COMPONENT, STEPS)

    def read(self, space: str, path: str) -> StoredDocument | None:
        return self.db.read(partial(_read, space=space, path=path))

    def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int:
        return self.db.write(partial(_write, space=space, path=path, text=text, metadata=metadata,
                                     if_version=if_version, now=now))

    def delete(self, space: str, path: str, if_version: int | None) -> bool:
        return self.db.write(partial(_delete, space=space, path=path, if_version=if_version))

    def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
        return self.db.read(partial(_list, space=space, where=where, after=after, limit=limit))

    def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
        return self.db.read(partial(_search, space=space, query=query, where=where, limit=limit))

    def records(self) -> Iterator[DocumentRecord]:
        after = ("", "")
        while page := self.db.read(partial(_records, after=after)):
            yield from page
            after = (page[-1].space, page[-1].path)

    def restore(self, record: DocumentRecord) -> None:
        self.db.write(partial(_restore, record=record))


class AsyncSqliteDocuments(DocumentsFacet):
    """The async face: writes group-committed by the file's writer thread; a read of one row on the
    caller's thread (microseconds), listings and searches on a worker thread, which may take
    milliseconds and must not hold up the event loop."""

    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        db.migrate(COMPONENT, STEPS)

    async def read(self, space: str, path: str) -> StoredDocument | None:
        return await self.db.aread(partial(_read, space=space, path=path))

    async def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None,
                    now: int) -> int:
        return await self.db.awrite(partial(_write, space=space, path=path, text=text, metadata=metadata,
                                            if_version=if_version, now=now))

    async def delete(self, space: str, path: str, if_version: int | None) -> bool:
        return await self.db.awrite(partial(_delete, space=space, path=path, if_version=if_version))

    async def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
        return await asyncio.to_thread(self.db.read, partial(_list, space=space, where=where, after=after,
                                                             limit=limit))

    async def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
        return await asyncio.to_thread(self.db.read, partial(_search, space=space, query=query, where=where,
                                                             limit=limit))

    async def records(self) -> AsyncIterator[DocumentRecord]:
        after = ("", "")
        while page := await asyncio.to_thread(self.db.read, partial(_records, after=after)):
            for record in page:
                yield record
            after = (page[-1].space, page[-1].path)

    async def restore(self, record: DocumentRecord) -> None:
        await self.db.awrite(partial(_restore, record=record))
