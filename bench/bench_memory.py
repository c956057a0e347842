"""Memory search at 10,000 and 100,000 documents of ~2 KB, and write throughput against a raw insert.

**Search.** Two stores per backend, one of 10,000 and one of 100,000 documents of ~2 KB (words of a
20,000-word vocabulary drawn with Zipf's law, the first line a title of eight of them). Planted in
both corpora, each of 40 rare words is in exactly 20 documents (5 of them in the title), followed
by the same partner word (a common one) in 10 of those, so these queries have about the same
number of matches at both sizes: what grows is the corpus, not the answer. Targets are the queries
of a rare word (alone, with a common word, in a phrase): a search that reads an index costs about
the same at both sizes, a scan would cost 10x. Shown but not targets: queries with a word that is in *every* document (a
stop word in all but name). Their cost grows with the corpus on any engine: every match of a
one-word query is ranked, and SQLite's ``bm25()`` counts the documents holding each query word by
walking that word's whole list of documents (PostgreSQL's ``ts_rank_cd`` does not weigh rarity).

**Writes.** Documents of ~2 KB written one per transaction, durably, alternating rounds: through
keepstate (the embedded store on SQLite, the server's async facet on PostgreSQL) against a raw
insert into a table with the same index (SQLite: an FTS5 table with the same tokenizer;
PostgreSQL: a table with the same generated ``tsvector`` column and GIN index), same settings.

Targets: the 100,000-document store costs <= 2x per query what the 10,000 one does; writes >= 0.7x
the raw insert. On a shared 2-core machine the figures are noisy: compare ratios in one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import keepstate
from keepstate.search import Query, parse_query
from keepstate.stores import open_database
from keepstate.stores.base import DocumentsFacet
from keepstate.stores.documents import PathFilter
from keepstate.stores.postgres.documents import STEPS as PG_STEPS

from .bench_scaleout import throwaway_schema as pg_schema
from .timing import table

SIZES = tuple(int(n) for n in os.environ.get("KEEPSTATE_BENCH_MEMORY_SIZES", "10000,100000").split(","))
NEEDLES, PER_NEEDLE, IN_TITLE, PHRASED = 40, 20, 5, 10
SPACE = "default/bench"
EVERYTHING = PathFilter()
SEARCH_ROUNDS, WRITE_ROUNDS, WRITES_PER_ROUND = 7, 6, 150


class Corpus:
    """Deterministic documents of ~2 KB with planted needles (see the module docstring)."""

    def __init__(self, seed: int = 7) -> None:
        rng = random.Random(seed)
        syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
        self.vocabulary = list(
            dict.fromkeys("".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(24_000))
        )[:20_000]
        weights = [1 / (rank + 1) for rank in range(len(self.vocabulary))]
        self.pool = rng.choices(self.vocabulary, weights, k=500_000)
        self.everywhere = self.vocabulary[3]
        self.partner = self.common = self.vocabulary[500]
        self.holding: dict[int, int] = {}
        """How many documents of a corpus of that size hold ``common`` (the partner word of the phrases)."""
        self.needles = [f"qx{index}zz" for index in range(NEEDLES)]

    def documents(self, count: int) -> Iterator[tuple[str, str]]:
        rng = random.Random(count)
        planted = self._planted(count, rng)
        self.holding[count] = 0
        for index in range(count):
            start = rng.randrange(len(self.pool) - 300)
            words = self.pool[start : start + 290]
            self.holding[count] += self.common in words
            for needle, where in planted.get(index, ()):
                words.insert(where, needle)
            yield f"docs/{index:07d}", " ".join(words[:8]) + "\n" + " ".join(words[8:])

    def _planted(self, count: int, rng: random.Random) -> dict[int, list[tuple[str, int]]]:
        """Which documents get which needle where: ``PER_NEEDLE`` each, the first few in the title,
        the first ``PHRASED`` followed by the partner word."""
        planted: dict[int, list[tuple[str, int]]] = {}
        for needle in self.needles:
            for order, index in enumerate(rng.sample(range(count), PER_NEEDLE)):
                where = rng.randrange(1, 7) if order < IN_TITLE else rng.randrange(20, 280)
                text = f"{needle} {self.partner}" if order < PHRASED else needle
                planted.setdefault(index, []).append((text, where))
        return planted

    def queries(self) -> dict[str, list[str]]:
        """Query sets by label; the labels of targets start with ``rare``."""
        return {
            "rare word": list(self.needles),
            "rare word + common word": [f"{needle} {self.common}" for needle in self.needles],
            'rare phrase "rare partner"': [f'"{needle} {self.partner}"' for needle in self.needles],
            "(shown) rare word + a word in every document": [f"{needle} {self.everywhere}" for needle in self.needles],
            "(shown) one word in every document": [self.everywhere] * 8,
        }


async def load(facet: DocumentsFacet, documents: Iterator[tuple[str, str]], concurrency: int = 32) -> float:
    """Write every document through the facet, ``concurrency`` at a time; documents per second."""
    started = time.perf_counter()
    written = 0
    batch: list[Awaitable[int]] = []
    for path, text in documents:
        batch.append(facet.write(SPACE, path, text, b"{}", None, 1))
        written += 1
        if len(batch) == concurrency:
            await asyncio.gather(*batch)
            batch = []
    await asyncio.gather(*batch)
    return written / (time.perf_counter() - started)


async def mean_query_ms(facet: DocumentsFacet, queries: list[Query]) -> float:
    """The mean time of one search (10 hits) over ``queries``, in milliseconds."""
    started = time.perf_counter()
    for query in queries:
        hits = await facet.search(SPACE, query, EVERYTHING, 10)
        assert hits, query
    return (time.perf_counter() - started) / len(queries) * 1000


async def compare(small: DocumentsFacet, large: DocumentsFacet, texts: list[str]) -> tuple[float, float, float]:
    """Both stores in alternating rounds (so the machine's drift hits both alike): the median time of
    each, and the median of the per-round ratios large / small."""
    queries = [parse_query(text) for text in texts]
    for facet in (small, large):
        await mean_query_ms(facet, queries[:3])  # warm caches
    rounds = [(await mean_query_ms(small, queries), await mean_query_ms(large, queries)) for _ in range(SEARCH_ROUNDS)]
    return (
        statistics.median(s for s, _ in rounds),
        statistics.median(g for _, g in rounds),
        statistics.median(g / s for s, g in rounds),
    )


async def analyze(url: str) -> None:
    """What autovacuum does for a live table: statistics for the planner, the GIN pending list merged."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE memory_documents")


async def search_rows(name: str, url_of: Callable[[int], Any], corpus: Corpus) -> list[tuple[object, ...]]:
    """Both stores loaded and open at once, then every query set measured on both, alternating."""
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(url_of(size)) for size in SIZES]
        databases = [open_database(url) for url in urls]
        try:
            facets, loads = [], []
            for size, url, database in zip(SIZES, urls, databases, strict=True):
                facets.append(await database.documents())
                loads.append(await load(facets[-1], corpus.documents(size)))
                if url.startswith("postgresql"):
                    await analyze(url)
            rows: list[tuple[object, ...]] = []
            for label, texts in corpus.queries().items():
                small, large, ratio = await compare(facets[0], facets[-1], texts)
                rows.append((name, label, f"{small:.2f}", f"{large:.2f}", f"{ratio:.2f}x"))
        finally:
            for database in databases:
                await database.aclose()
    rows.append((name, "load (32 writes in flight)", f"{loads[0]:,.0f} docs/s", f"{loads[-1]:,.0f} docs/s", ""))
    return rows


@contextmanager
def sqlite_file(size: int) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        yield f"sqlite:///{Path(folder) / f'memory-{size}.db'}"


# ---------------------------------------------------------------- writes

RAW_PG_INSERT = (
    "INSERT INTO raw_documents (space, path, version, live, text, metadata, updated_at) "
    "VALUES (%s, %s, 1, true, %s, %s, 1)"
)
Writer = Callable[[int], Awaitable[object]]


async def alternate(raw: Writer, ours: Writer) -> tuple[float, float, float]:
    """Docs/s of each, in alternating rounds of fresh documents, and the median of the per-round ratios."""
    pairs = []
    for round_index in range(WRITE_ROUNDS):
        rates = []
        for write in (raw, ours):
            started = time.perf_counter()
            for index in range(round_index * WRITES_PER_ROUND, (round_index + 1) * WRITES_PER_ROUND):
                await write(index)
            rates.append(WRITES_PER_ROUND / (time.perf_counter() - started))
        pairs.append((rates[0], rates[1]))
    return (
        statistics.median(r for r, _ in pairs),
        statistics.median(o for _, o in pairs),
        statistics.median(o / r for r, o in pairs),
    )


def write_texts(corpus: Corpus) -> list[str]:
    return [text for _, text in corpus.documents(WRITE_ROUNDS * WRITES_PER_ROUND)]


async def sqlite_writes(corpus: Corpus) -> tuple[object, ...]:
    texts = write_texts(corpus)
    with tempfile.TemporaryDirectory() as folder:
        raw = sqlite3.connect(Path(folder) / "raw.db", isolation_level=None)
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("PRAGMA synchronous=FULL")
        raw.execute("CREATE VIRTUAL TABLE raw_fts USING fts5(title, body, tokenize='porter unicode61')")

        async def raw_insert(index: int) -> None:
            title, _, body = texts[index].partition("\n")
            raw.execute("INSERT INTO raw_fts (title, body) VALUES (?, ?)", (title, body))

        with keepstate.open(f"sqlite:///{Path(folder) / 'store.db'}") as store:
            memory = store.memory("bench")
            memory.write("warm", "up")

            async def write(index: int) -> int:
                return memory.write(f"docs/{index:07d}", texts[index])

            found = await alternate(raw_insert, write)
        raw.close()
    return ("SQLite", "embedded store.memory().write", *found)


async def pg_writes(corpus: Corpus) -> tuple[object, ...]:
    import psycopg

    texts = write_texts(corpus)
    with pg_schema() as url:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
            await raw.execute(PG_STEPS[0].replace("memory_documents", "raw_documents"))
            database = open_database(url)
            try:
                facet = await database.documents()
                await facet.write(SPACE, "warm", "up", b"{}", None, 1)

                async def raw_insert(index: int) -> object:
                    return await raw.execute(RAW_PG_INSERT, (SPACE, f"docs/{index:07d}", texts[index], b"{}"))

                async def write(index: int) -> int:
                    return await facet.write(SPACE, f"docs/{index:07d}", texts[index], b"{}", None, 1)

                found = await alternate(raw_insert, write)
            finally:
                await database.aclose()
    return ("PostgreSQL", "server's async facet write, 1 connection", *found)


async def _all(corpus: Corpus) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    searches = await search_rows("SQLite", sqlite_file, corpus)
    writes = [await sqlite_writes(corpus)]
    searches += await search_rows("PostgreSQL", lambda size: pg_schema(), corpus)
    writes.append(await pg_writes(corpus))
    return searches, writes


def run() -> str:
    corpus = Corpus()
    searches, writes = asyncio.run(_all(corpus))
    small, large = SIZES[0], SIZES[-1]
    target_rows = [row for row in searches if str(row[1]).startswith("rare")]
    worst = max(float(str(row[4]).rstrip("x")) for row in target_rows)
    slowest_write = min(float(row[4]) for row in writes)  # type: ignore[arg-type]
    return "\n".join(
        [
            "## Memory: search and writes",
            "",
            __doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
            "",
            f"**Search**: mean time of one search (10 hits), ms; {SEARCH_ROUNDS} rounds of each query set, "
            "alternating between the two stores; the last column is the median of the per-round ratios. "
            f"The common word is in {corpus.holding.get(small, 0) / small:.0%} and "
            f"{corpus.holding.get(large, 0) / large:.0%} of the documents.",
            "",
            table(
                ("backend", "query", f"{small:,} docs", f"{large:,} docs", f"{large // small}x docs costs"), searches
            ),
            "",
            f"**Writes**: {WRITES_PER_ROUND} documents per round, {WRITE_ROUNDS} alternating rounds, one durable "
            "transaction each.",
            "",
            table(("backend", "keepstate", "raw docs/s", "keepstate docs/s", "keepstate / raw"), writes),
            "",
            f"Targets: {large // small}x the documents costs <= 2x per query: worst {worst:.2f}x "
            f"{'met' if worst <= 2 else 'NOT met'}; writes >= 0.7x raw: worst {slowest_write:.2f}x "
            f"{'met' if slowest_write >= 0.7 else 'NOT met'}.",
        ]
    )
