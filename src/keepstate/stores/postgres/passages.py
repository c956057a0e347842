"""Semantic search on PostgreSQL: documents' passages and their vectors, with pgvector's HNSW where it is installed.

``memory_passages`` holds each embedded passage of a document: its span of the text, its vector as
float32 bytes (``keepstate.vectors``), and the dimension. ``memory_documents.embedding`` records
the key of the embedder that made them (NULL: not embedded); a trigger drops a document's passages
and that key whenever a write or delete changes its version or liveness, in the same statement.

Without pgvector, a search is an exact scan: the passages the filter admits are read and scored in
Python. Where the ``vector`` extension is installed in the database (``CREATE EXTENSION vector``,
in any schema: keepstate finds it and never creates it), a second migration adds an
``embedding`` column of pgvector's type, and the first passage of each dimension creates a partial
HNSW index (cosine) over the passages of that dimension. A search then asks the index for the
nearest passages (``hnsw.iterative_scan``, so filtered-out rows do not starve the answer), and
falls back to the exact scan when the index gives fewer documents than asked for (a small memory, a
narrow folder, a filter): approximate only where an exact answer would cost a scan of many rows.
"""

from __future__ import annotations

import contextlib
from array import array
from collections.abc import Sequence
from typing import Any

from ...vectors import nearest_documents
from ..documents import StoredHit, StoredPassage, Unembedded, filter_sql, passage_snippet
from . import db
from .db import aconnection

try:
    import psycopg
    import psycopg_pool
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("PostgreSQL support needs the extra: pip install 'keepstate[postgres]'") from missing

STEP = """
    ALTER TABLE memory_documents ADD COLUMN embedding TEXT;
    CREATE TABLE memory_passages (
        space  TEXT COLLATE "C" NOT NULL,
        path   TEXT COLLATE "C" NOT NULL,
        n      INTEGER NOT NULL,
        start  INTEGER NOT NULL,
        stop   INTEGER NOT NULL,
        dims   INTEGER NOT NULL,
        vector BYTEA NOT NULL,
        PRIMARY KEY (space, path, n)
    );
    CREATE INDEX memory_documents_unembedded ON memory_documents (space, path) WHERE live AND embedding IS NULL;
    CREATE FUNCTION memory_documents_unembed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.version IS DISTINCT FROM OLD.version OR NEW.live IS DISTINCT FROM OLD.live THEN
            NEW.embedding := NULL;
            DELETE FROM memory_passages WHERE space = OLD.space AND path = OLD.path;
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER memory_documents_unembed BEFORE UPDATE ON memory_documents
        FOR EACH ROW EXECUTE FUNCTION memory_documents_unembed();
"""
VECTOR_COMPONENT = "documents_pgvector"
_VECTOR_STEPS = (
    """
    ALTER TABLE memory_passages ADD COLUMN embedding {schema}.vector;
    DELETE FROM memory_passages;
    UPDATE memory_documents SET embedding = NULL WHERE embedding IS NOT NULL;
    """,
)
MAX_INDEXED_DIMS = 2000
"""pgvector's HNSW indexes vectors of at most 2,000 dimensions; longer ones are scanned."""
EF_SEARCH = 200
OVERFETCH = 4
"""Passages asked of the index per document wanted: a document's several passages may all be near."""


def metadata_sql(column: str) -> str:
    """The ``PathFilter``'s metadata fields as a condition on the ``bytea`` JSON ``column``: jsonb equality
    of each field (``1`` equals ``1.0``, ``true`` never equals ``1``)."""
    return (
        "(%(metadata_filter)s::jsonb IS NULL OR NOT EXISTS (SELECT 1 FROM jsonb_each(%(metadata_filter)s::jsonb) AS f "
        f"WHERE (convert_from({column}, 'UTF8')::jsonb -> f.key) IS DISTINCT FROM f.value))"
    )


_WHERE = (
    f"d.space = %(space)s AND d.live AND {filter_sql('d.path', '%({})s::text')} AND {metadata_sql('d.metadata')} "
    "AND d.embedding = %(key)s"
)
_PASSAGE_ROWS = f"""SELECT d.path, p.n, p.vector FROM memory_passages p
    JOIN memory_documents d ON d.space = p.space AND d.path = p.path
    WHERE p.space = %(space)s AND {_WHERE} ORDER BY d.path, p.n"""
_INDEXED = """SELECT d.path, p.n, p.vector FROM memory_passages p
    JOIN memory_documents d ON d.space = p.space AND d.path = p.path
    WHERE p.dims = {dims} AND p.space = %(space)s AND {where}
    ORDER BY p.embedding::{vector} OPERATOR({schema}.<=>) %(query)s::{vector} LIMIT %(passages)s"""
_HITS = """SELECT p.path, p.n, d.version, substr(d.text, p.start + 1, p.stop - p.start) FROM memory_passages p
    JOIN memory_documents d ON d.space = p.space AND d.path = p.path
    WHERE p.space = %(space)s AND (p.path, p.n) IN (SELECT * FROM unnest(%(paths)s::text[], %(ns)s::int[]))"""
_MARK = """UPDATE memory_documents SET embedding = %(key)s
    WHERE space = %(space)s AND path = %(path)s AND live AND version = %(version)s RETURNING 1"""
_MARK_WRITTEN = "UPDATE memory_documents SET embedding = %(key)s WHERE space = %(space)s AND path = %(path)s AND live"
_UNMARK = "DELETE FROM memory_passages WHERE space = %s AND path = %s"
_ADD = """INSERT INTO memory_passages (space, path, n, start, stop, dims, vector{column})
    VALUES (%s, %s, %s, %s, %s, %s, %s{value})"""
_UNEMBEDDED = """SELECT space, path, version, text FROM memory_documents
    WHERE (space, path) > (%(space_after)s, %(path_after)s) AND live AND {which}
        AND (%(only_space)s::text IS NULL OR space = %(only_space)s) ORDER BY space, path LIMIT %(limit)s"""
_MISSING = _UNEMBEDDED.format(which="embedding IS NULL")
_NOT_CURRENT = _UNEMBEDDED.format(which="embedding IS DISTINCT FROM %(key)s")
_COUNTS = """SELECT count(*) FILTER (WHERE embedding = %(key)s), count(*) FROM memory_documents
    WHERE live AND (%(only_space)s::text IS NULL OR space = %(only_space)s)"""
_VECTOR_SCHEMA = """SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'vector'"""


def _literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class PostgresPassages:
    """The semantic half of ``PostgresDocuments``: passages, the exact scan, and pgvector's index."""

    pool: psycopg_pool.AsyncConnectionPool
    _vectors: str | bool | None = False
    """The schema of the ``vector`` extension once looked up (None: not installed), False before."""
    _indexed: frozenset[int] = frozenset()

    async def nearest(self, space: str, key: str, vector: array[float], where: Any, limit: int) -> list[StoredHit]:
        params = {"space": space, "key": key, **where.sql_params()}
        schema = await self._vector_schema()
        found: list[tuple[str, int, float]] = []
        if schema is not None and len(vector) <= MAX_INDEXED_DIMS:
            found = await self._indexed_scan(schema, params, vector, limit)
        if len(found) < limit:
            async with aconnection(self.pool) as conn:
                rows = await (await conn.execute(_PASSAGE_ROWS, params, prepare=False)).fetchall()
            found = nearest_documents(vector, [(str(p), int(n), bytes(v)) for p, n, v in rows], limit)
        return await self._hits(space, found)

    async def _indexed_scan(
        self, schema: str, params: dict[str, Any], vector: array[float], limit: int
    ) -> list[tuple[str, int, float]]:
        dims = len(vector)
        sql = _INDEXED.format(dims=dims, where=_WHERE, schema=schema, vector=f"{schema}.vector({dims})")
        asked = {**params, "query": _literal(vector), "passages": limit * OVERFETCH}
        async with aconnection(self.pool) as conn, conn.transaction():
            await conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(EF_SEARCH),))
            await conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
            rows = await (await conn.execute(sql, asked, prepare=False)).fetchall()
        return nearest_documents(vector, [(str(p), int(n), bytes(v)) for p, n, v in rows], limit)

    async def _hits(self, space: str, found: list[tuple[str, int, float]]) -> list[StoredHit]:
        """The version and snippet of each document found; one gone since (rewritten) is left out."""
        if not found:
            return []
        params = {"space": space, "paths": [p for p, _, _ in found], "ns": [n for _, n, _ in found]}
        async with aconnection(self.pool) as conn:
            rows = await (await conn.execute(_HITS, params)).fetchall()
        read = {(str(p), int(n)): (int(v), str(text)) for p, n, v, text in rows}
        return [
            StoredHit(path, score, passage_snippet(read[path, n][1], 0, len(read[path, n][1])), read[path, n][0])
            for path, n, score in found
            if (path, n) in read
        ]

    async def attach(self, space: str, path: str, version: int, key: str, passages: Sequence[StoredPassage]) -> bool:
        schema = await self._prepared(passages)
        async with aconnection(self.pool) as conn, conn.transaction():
            return await self._attach_on(conn, schema, space, path, version, key, passages)

    async def _prepared(self, passages: Sequence[StoredPassage]) -> str | None:
        """pgvector's schema (None: not installed), with the HNSW index of these passages' dimension made."""
        schema = await self._vector_schema()
        dims = len(passages[0].vector) // 4 if passages else 0
        if schema is not None and passages and dims <= MAX_INDEXED_DIMS:
            await self._index_for(schema, dims)
        return schema

    @staticmethod
    async def _attach_on(
        conn: psycopg.AsyncConnection[Any],
        schema: str | None,
        space: str,
        path: str,
        version: int | None,
        key: str,
        passages: Sequence[StoredPassage],
    ) -> bool:
        """``attach`` on ``conn``, inside its caller's transaction; ``version`` None: the version the
        same transaction has just written (nothing is read back, so it can be pipelined)."""
        params = {"space": space, "path": path, "version": version, "key": key}
        marked = await conn.execute(_MARK if version is not None else _MARK_WRITTEN, params)
        if version is not None and await marked.fetchone() is None:
            return False
        await conn.execute(_UNMARK, (space, path))
        dims = len(passages[0].vector) // 4 if passages else 0
        indexed = schema is not None and dims <= MAX_INDEXED_DIMS
        column, value = (", embedding", f", %s::{schema}.vector") if indexed else ("", "")
        rows = [
            (space, path, n, p.start, p.stop, dims, p.vector, *([_literal(_floats(p))] if indexed else []))
            for n, p in enumerate(passages)
        ]
        async with conn.cursor() as cursor:
            await cursor.executemany(_ADD.format(column=column, value=value), rows)
        return True

    async def unembedded(
        self, key: str | None, space: str | None, after: tuple[str, str], limit: int
    ) -> list[Unembedded]:
        params = {"key": key, "only_space": space, "space_after": after[0], "path_after": after[1], "limit": limit}
        async with aconnection(self.pool) as conn:
            rows = await (await conn.execute(_MISSING if key is None else _NOT_CURRENT, params)).fetchall()
        return [Unembedded(str(s), str(p), int(v), str(t)) for s, p, v, t in rows]

    async def embedding_counts(self, key: str, space: str | None) -> tuple[int, int]:
        async with aconnection(self.pool) as conn:
            row = await (await conn.execute(_COUNTS, {"key": key, "only_space": space})).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    async def _vector_schema(self) -> str | None:
        """pgvector's schema when the extension is installed (its column migrated in then), else None."""
        if self._vectors is False:
            async with aconnection(self.pool) as conn:
                row = await (await conn.execute(_VECTOR_SCHEMA)).fetchone()
            schema = None if row is None else psycopg.sql.Identifier(str(row[0])).as_string(None)
            if schema is not None:
                await db.amigrate(self.pool, VECTOR_COMPONENT, [step.format(schema=schema) for step in _VECTOR_STEPS])
            self._vectors = schema
        return self._vectors if isinstance(self._vectors, str) else None

    async def _index_for(self, schema: str, dims: int) -> None:
        """The HNSW index of the passages of ``dims`` dimensions, made by the first of them."""
        if dims in self._indexed:
            return
        sql = (
            f"CREATE INDEX IF NOT EXISTS memory_passages_hnsw_{dims} ON memory_passages USING hnsw "
            f"((embedding::{schema}.vector({dims})) {schema}.vector_cosine_ops) WHERE dims = {dims}"
        )
        with contextlib.suppress(psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
            async with aconnection(self.pool) as conn:
                await conn.execute(sql)
        self._indexed = self._indexed | {dims}


def _floats(passage: StoredPassage) -> array[float]:
    vector = array("f")
    vector.frombytes(passage.vector)
    return vector
