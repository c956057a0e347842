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
snippets only for the hits returned: with ``snippet()`` for a document of at most ``SNIPPET_SCAN``
characters, else in Python from a window of it (``_windowed``), as ``snippet()`` tokenizes a whole
text and a search of big documents would cost their size. The match expression is built from the parsed ``Query``: each
term is one FTS5 string (``"…"``, inner quotes doubled), so no user text is ever FTS5 syntax.
"""

from __future__ import annotations

import sqlite3
from array import array
from collections.abc import AsyncIterator, Iterator, Sequence
from functools import partial
from typing import Any

from ... import offload
from ...errors import VersionConflict
from ...search import Query
from ...vectors import nearest_documents
from ..base import DocumentsFacet
from ..documents import (
    RECORDS_PAGE,
    SNIPPET_END,
    SNIPPET_GAP,
    SNIPPET_SCAN,
    SNIPPET_START,
    SNIPPET_WINDOW,
    SNIPPET_WORDS,
    TITLE_WEIGHT,
    DocumentHead,
    DocumentRecord,
    DocumentWrite,
    PathFilter,
    StoredDocument,
    StoredHit,
    StoredPassage,
    Unembedded,
    filter_sql,
    join_title,
    one_line,
    passage_snippet,
    split_title,
)
from ..snippets import Field, Terms, snippet, terms_of
from .db import SqliteFile, version_guard

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
    # 2: no write takes a version past the highest one (``records.version_limit``)
    version_guard("keepstate_documents"),
    # 3: semantic search: a document's passages with their vectors, and the key of the embedder that made
    # them (NULL: not embedded). Any write or delete drops them, in the same transaction (the trigger).
    """
    ALTER TABLE keepstate_documents ADD COLUMN embedding TEXT;
    CREATE TABLE keepstate_passages (
        document INTEGER NOT NULL,
        n INTEGER NOT NULL,
        start INTEGER NOT NULL,
        stop INTEGER NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (document, n)
    ) WITHOUT ROWID;
    CREATE INDEX keepstate_documents_unembedded ON keepstate_documents (space, path)
        WHERE live = 1 AND embedding IS NULL;
    CREATE TRIGGER keepstate_documents_unembed AFTER UPDATE OF version, live ON keepstate_documents BEGIN
        DELETE FROM keepstate_passages WHERE document = new.id;
        UPDATE keepstate_documents SET embedding = NULL WHERE id = new.id AND embedding IS NOT NULL;
    END;
    CREATE TRIGGER keepstate_documents_forget AFTER DELETE ON keepstate_documents BEGIN
        DELETE FROM keepstate_passages WHERE document = old.id;
    END;
    """,
]

_READ = (
    "SELECT title, body, metadata, version, updated_at FROM keepstate_documents "
    "WHERE space = ? AND path = ? AND live = 1"
)
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
_DELETE = (
    "UPDATE keepstate_documents SET live = 0, title = NULL, body = NULL, metadata = NULL "
    "WHERE space = ? AND path = ? AND live = 1 RETURNING version"
)


def _where(table: str) -> str:
    """Live rows of the space that the ``PathFilter`` admits (its bounds as named parameters)."""
    return (
        f"{table}.space = :space AND {table}.live = 1 AND {filter_sql(f'{table}.path', ':{}')} "
        f"AND {_metadata_sql(f'{table}.metadata')}"
    )


def _metadata_sql(column: str) -> str:
    """The ``PathFilter``'s metadata fields (``:metadata_filter``, JSON) as a condition on ``column``: no
    field of the filter whose type (numbers alike) or value differs from the document's."""
    field = "'$.\"' || f.key || '\"'"
    found_type = f"json_type(CAST({column} AS TEXT), {field})"
    numeric = "('integer', 'real')"
    return (
        "(:metadata_filter IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(:metadata_filter) AS f WHERE "
        f"NOT ({found_type} IS f.type OR (f.type IN {numeric} AND {found_type} IN {numeric})) "
        f"OR json_extract(CAST({column} AS TEXT), {field}) IS NOT f.atom))"
    )


_SIZE = "length(CAST(title AS BLOB)) + coalesce(length(CAST(body AS BLOB)) + 1, 0)"
"""A document's bytes of UTF-8: its first line, and the rest after the newline."""
_LIST = (
    f"SELECT path, version, updated_at, {_SIZE} FROM keepstate_documents WHERE {_where('keepstate_documents')} "
    "AND path > :after "
    "ORDER BY path LIMIT :limit"
)
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


_RECORDS = (
    "SELECT space, path, version, live, title, body, metadata, updated_at FROM keepstate_documents "
    "WHERE (space, path) > (?, ?) ORDER BY space, path LIMIT ?"
)
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


def _write(
    conn: sqlite3.Connection, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int
) -> int:
    title, body = split_title(text)
    params: dict[str, Any] = {
        "space": space,
        "path": path,
        "title": title,
        "body": body,
        "metadata": metadata,
        "now": now,
        "if_version": if_version,
    }
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
    terms = terms_of([term.words for term in query.terms])
    anchor = max((word for stems in terms for word in stems), key=len)
    hits = []
    for rowid, path, version, rank in rows:
        text = _windowed(conn, rowid, anchor, terms)
        if text is None:
            found = conn.execute(_SNIPPET, (match, rowid)).fetchone()
            text = str(found[0] or "") if found else ""
        hits.append(StoredHit(str(path), -float(rank), one_line(text), int(version)))
    return hits


def _windowed(conn: sqlite3.Connection, rowid: int, anchor: str, terms: Terms) -> str | None:
    """The snippet of a document longer than ``SNIPPET_SCAN`` bytes, made from a window of its first
    ``SNIPPET_SCAN`` bytes (of its first line when ``anchor``, the query's longest stem, is in them,
    else of the rest) around the first place ``anchor`` appears; None for a shorter document, whose
    whole text FTS5's ``snippet()`` may tokenize at a cost bounded by that size. The heads are read as
    blobs, which reads only their first pages however long the text is."""
    (title, title_big), (body, body_big) = (_head(conn, rowid, column) for column in ("title", "body"))
    if not (title_big or body_big):
        return None
    head = (title if body is None or anchor in (title or "").lower() else body) or ""
    at = max(head.lower().find(anchor), 0)
    lead, window = SNIPPET_WINDOW
    start = max(at - lead, 0)
    cut = (start > 0, start + window < len(head) or title_big or body_big)
    return snippet(Field.of(""), Field.of(head[start : start + window]), terms, cut)


def _head(conn: sqlite3.Connection, rowid: int, column: str) -> tuple[str | None, bool]:
    """The first ``SNIPPET_SCAN`` bytes of one column of a document (a character cut in two dropped),
    and whether there is more; ``(None, False)`` for a NULL (a text without a newline has no body)."""
    try:
        with conn.blobopen("keepstate_documents", column, rowid, readonly=True) as blob:
            return blob.read(SNIPPET_SCAN).decode("utf-8", "ignore"), len(blob) > SNIPPET_SCAN
    except sqlite3.OperationalError:  # "cannot open value of type null"
        return None, False


def _records(conn: sqlite3.Connection, after: tuple[str, str]) -> list[DocumentRecord]:
    """The next ``RECORDS_PAGE`` documents after ``(space, path)``, tombstones included."""
    return [
        DocumentRecord(
            str(space),
            str(path),
            int(version),
            join_title(title, body) if live else None,
            bytes(metadata) if live else b"{}",
            int(updated_at),
        )
        for space, path, version, live, title, body, metadata, updated_at in conn.execute(
            _RECORDS, (*after, RECORDS_PAGE)
        )
    ]


def _restore(conn: sqlite3.Connection, record: DocumentRecord) -> None:
    title, body = (None, None) if record.text is None else split_title(record.text)
    conn.execute(
        _RESTORE,
        {
            "space": record.space,
            "path": record.path,
            "version": record.version,
            "live": int(not record.deleted),
            "title": title,
            "body": body,
            "metadata": None if record.deleted else record.metadata,
            "updated_at": record.updated_at,
        },
    )


# ---------------------------------------------------------------- semantic search (an exact scan)

_PASSAGE_ROWS = (
    "SELECT d.path, p.n, p.vector FROM keepstate_passages AS p JOIN keepstate_documents AS d ON d.id = p.document "
    f"WHERE d.embedding = :key AND {_where('d')} ORDER BY d.path, p.n"
)
_HIT = (
    "SELECT d.path, d.version, d.title, d.body, p.start, p.stop FROM keepstate_documents AS d "
    "JOIN keepstate_passages AS p ON p.document = d.id WHERE d.space = ? AND d.path = ? AND p.n = ?"
)
_MARK = (
    "UPDATE keepstate_documents SET embedding = :key "
    "WHERE space = :space AND path = :path AND live = 1 AND version = :version RETURNING id"
)
_UNMARK_PASSAGES = "DELETE FROM keepstate_passages WHERE document = ?"
_ADD_PASSAGE = "INSERT INTO keepstate_passages (document, n, start, stop, vector) VALUES (?, ?, ?, ?, ?)"
_UNEMBEDDED = (
    "SELECT space, path, version, title, body FROM keepstate_documents "
    "WHERE (space, path) > (:space_after, :path_after) AND live = 1 AND {which} "
    "AND (:only_space IS NULL OR space = :only_space) ORDER BY space, path LIMIT :limit"
)
_MISSING = _UNEMBEDDED.format(which="embedding IS NULL")
_NOT_CURRENT = _UNEMBEDDED.format(which="embedding IS NOT :key")
_COUNTS = (
    "SELECT count(*) FILTER (WHERE embedding = :key), count(*) FROM keepstate_documents "
    "WHERE live = 1 AND (:only_space IS NULL OR space = :only_space)"
)


def _nearest(
    conn: sqlite3.Connection, space: str, key: str, vector: array[float], where: PathFilter, limit: int
) -> list[StoredHit]:
    """Every passage of the space's documents embedded with ``key`` that ``where`` admits, scored in
    one read snapshot; the text of the best ``limit`` documents read after."""
    params = {"space": space, "key": key, **where.sql_params()}
    rows = conn.execute(_PASSAGE_ROWS, params).fetchall()
    hits = []
    for document, n, score in nearest_documents(vector, rows, limit):
        path, version, title, body, start, stop = conn.execute(_HIT, (space, document, n)).fetchone()
        hits.append(StoredHit(str(path), score, passage_snippet(join_title(title, body), start, stop), int(version)))
    return hits


def _attach(
    conn: sqlite3.Connection, space: str, path: str, version: int, key: str, passages: Sequence[StoredPassage]
) -> bool:
    """Give version ``version`` of the document its passages; False (nothing written) when the document
    is at another version or deleted: its new text gets its own."""
    row = conn.execute(_MARK, {"space": space, "path": path, "version": version, "key": key}).fetchone()
    if row is None:
        return False
    conn.execute(_UNMARK_PASSAGES, (row[0],))
    conn.executemany(_ADD_PASSAGE, [(row[0], n, p.start, p.stop, p.vector) for n, p in enumerate(passages)])
    return True


def _embedded_write(
    written: DocumentWrite, key: str, passages: Sequence[StoredPassage], conn: sqlite3.Connection
) -> int:
    """``_write``, then ``_attach`` of its passages to the new version, in the caller's one transaction."""
    version = _write(conn, *written.args)
    _attach(conn, written.space, written.path, version, key, passages)
    return version


def _unembedded(
    conn: sqlite3.Connection, key: str | None, space: str | None, after: tuple[str, str], limit: int
) -> list[Unembedded]:
    params = {"key": key, "only_space": space, "space_after": after[0], "path_after": after[1], "limit": limit}
    rows = conn.execute(_MISSING if key is None else _NOT_CURRENT, params)
    return [Unembedded(str(s), str(p), int(v), join_title(t, b)) for s, p, v, t, b in rows]


def _counts(conn: sqlite3.Connection, key: str, space: str | None) -> tuple[int, int]:
    done, total = conn.execute(_COUNTS, {"key": key, "only_space": space}).fetchone()
    return int(done), int(total)


class SqliteDocuments:
    """The sync face: each write one ``BEGIN IMMEDIATE`` transaction on the caller's thread."""

    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        db.migrate(COMPONENT, STEPS)

    def read(self, space: str, path: str) -> StoredDocument | None:
        return self.db.read(partial(_read, space=space, path=path))

    def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int:
        return self.db.write(
            partial(_write, space=space, path=path, text=text, metadata=metadata, if_version=if_version, now=now)
        )

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

    def nearest(self, space: str, key: str, vector: array[float], where: PathFilter, limit: int) -> list[StoredHit]:
        return self.db.read(partial(_nearest, space=space, key=key, vector=vector, where=where, limit=limit))

    def write_embedded(self, written: DocumentWrite, key: str, passages: Sequence[StoredPassage]) -> int:
        return self.db.write(partial(_embedded_write, written, key, passages))

    def attach(self, space: str, path: str, version: int, key: str, passages: Sequence[StoredPassage]) -> bool:
        return self.db.write(partial(_attach, space=space, path=path, version=version, key=key, passages=passages))

    def unembedded(self, key: str | None, space: str | None, after: tuple[str, str], limit: int) -> list[Unembedded]:
        return self.db.read(partial(_unembedded, key=key, space=space, after=after, limit=limit))

    def embedding_counts(self, key: str, space: str | None) -> tuple[int, int]:
        return self.db.read(partial(_counts, key=key, space=space))


class AsyncSqliteDocuments(DocumentsFacet):
    """The async face: writes group-committed by the file's writer thread; a read of one row on the
    caller's thread (microseconds), listings and searches on a worker thread, which may take
    milliseconds and must not hold up the event loop: searches in a pool of their own, so that many
    slow ones never hold up a listing or a request's body (``keepstate.offload``)."""

    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        db.migrate(COMPONENT, STEPS)

    async def read(self, space: str, path: str) -> StoredDocument | None:
        return await self.db.aread(partial(_read, space=space, path=path))

    async def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int:
        return await self.db.awrite(
            partial(_write, space=space, path=path, text=text, metadata=metadata, if_version=if_version, now=now)
        )

    async def delete(self, space: str, path: str, if_version: int | None) -> bool:
        return await self.db.awrite(partial(_delete, space=space, path=path, if_version=if_version))

    async def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
        return await offload.run(
            "scan", self.db.read, partial(_list, space=space, where=where, after=after, limit=limit)
        )

    async def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
        return await offload.run(
            "search", self.db.read, partial(_search, space=space, query=query, where=where, limit=limit)
        )

    async def records(self) -> AsyncIterator[DocumentRecord]:
        after = ("", "")
        while page := await offload.run("scan", self.db.read, partial(_records, after=after)):
            for record in page:
                yield record
            after = (page[-1].space, page[-1].path)

    async def restore(self, record: DocumentRecord) -> None:
        await self.db.awrite(partial(_restore, record=record))

    async def nearest(
        self, space: str, key: str, vector: array[float], where: PathFilter, limit: int
    ) -> list[StoredHit]:
        return await offload.run(
            "search", self.db.read, partial(_nearest, space=space, key=key, vector=vector, where=where, limit=limit)
        )

    async def write_embedded(self, written: DocumentWrite, key: str, passages: Sequence[StoredPassage]) -> int:
        return await self.db.awrite(partial(_embedded_write, written, key, passages))

    async def attach(self, space: str, path: str, version: int, key: str, passages: Sequence[StoredPassage]) -> bool:
        return await self.db.awrite(
            partial(_attach, space=space, path=path, version=version, key=key, passages=passages)
        )

    async def unembedded(
        self, key: str | None, space: str | None, after: tuple[str, str], limit: int
    ) -> list[Unembedded]:
        return await offload.run(
            "scan", self.db.read, partial(_unembedded, key=key, space=space, after=after, limit=limit)
        )

    async def embedding_counts(self, key: str, space: str | None) -> tuple[int, int]:
        return await offload.run("scan", self.db.read, partial(_counts, key=key, space=space))
