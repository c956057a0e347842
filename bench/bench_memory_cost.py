"""What a memory search costs the other requests of a server, and what big documents cost a search.

**Isolation (SQLite).** One server app in this process over a SQLite file of 5,000 memory documents of
~2 KB (``bench_memory``'s corpus). Eight clients search a phrase of 139 words (as many as the
1,000-character query limit holds) back to back while another agent writes a 100 KB state value
(its body parsed off the event loop) every 50 ms; the write's latency is measured with the searches
running and without, in alternating rounds, two ways: *before*, every kind of blocking work in one
shared pool the size of asyncio's default executor (how the server ran them before), and *after*,
each kind in a pool of its own (``keepstate.offload``: searches, scans, body parsing).

**Big hits.** 20 documents of ~1 MB and 20 of ~2 KB each hold a word of their own once, past the
first 16 KB in the big ones; one search of each word (20 hits, each with its snippet), in
alternating rounds: *before*, the snippet made over the whole text (SQLite's FTS5 ``snippet()``,
PostgreSQL's ``ts_headline``), *after*, from a window of at most the first 16 KB (``SNIPPET_SCAN``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from keepstate import offload
from keepstate.search import parse_query
from keepstate.server.app import create_app
from keepstate.stores import open_database
from keepstate.stores.base import DocumentsFacet
from keepstate.stores.documents import PathFilter
from keepstate.stores.postgres import documents as pg_documents
from keepstate.stores.sqlite import documents as sqlite_documents

from .bench_memory import Corpus
from .bench_scaleout import throwaway_schema as pg_schema
from .timing import table

ROOT = "ks_root_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
DOCS, SEARCHERS, WRITES, ROUNDS = 5000, 8, 20, 3
BIG, BIG_CHARS, QUERY_CHARS = 20, 1_000_000, 990
SPACE = "default/kb"


@contextlib.contextmanager
def one_shared_pool() -> Iterator[None]:
    """Every kind of blocking work in one pool the size of asyncio's default executor (before)."""
    shared = ThreadPoolExecutor(min(32, (os.cpu_count() or 1) + 4))
    own = offload.pool
    offload.pool = lambda kind: shared
    try:
        yield
    finally:
        offload.pool = own
        shared.shutdown()


async def fill(facet: DocumentsFacet, documents: list[tuple[str, str]]) -> None:
    for start in range(0, len(documents), 200):
        batch = documents[start : start + 200]
        await asyncio.gather(*(facet.write(SPACE, path, text, b"{}", None, 1) for path, text in batch))


def long_phrase(text: str) -> str:
    words: list[str] = []
    for word in text.split("\n", 1)[1].split():
        if len(" ".join([*words, word])) > QUERY_CHARS:
            break
        words.append(word)
    return '"' + " ".join(words) + '"'


@contextlib.asynccontextmanager
async def served(url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(url, bootstrap_admin=True, admin_key=ROOT)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app)
        headers = {"Authorization": f"Bearer {ROOT}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers=headers, timeout=120) as c:
            yield c


async def write_latencies(http: httpx.AsyncClient, searching: bool, phrase: str) -> list[float]:
    """The latency of ``WRITES`` 100 KB writes, 50 ms apart, with the searchers running or not."""
    stop = asyncio.Event()

    async def search() -> None:
        while not stop.is_set():
            found = await http.post("/v0/agents/kb/memory/search", json={"query": phrase})
            assert found.status_code == 200, found.text

    searchers = [asyncio.create_task(search()) for _ in range(SEARCHERS if searching else 0)]
    await asyncio.sleep(0.2 if searching else 0)  # the searches are under way
    body, took = {"value": "x" * 100_000}, []
    for _ in range(WRITES):
        started = time.perf_counter()
        assert (await http.put("/v0/agents/other/state/big", json=body)).status_code == 200
        took.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*searchers)
    return took


async def isolation(corpus: Corpus) -> list[tuple[object, ...]]:
    documents = list(corpus.documents(DOCS))
    phrase = long_phrase(documents[17][1])
    seen: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'served.db'}"
        database = open_database(url)
        await fill(await database.documents(), documents)
        await database.aclose()
        async with served(url) as http:
            for _ in range(ROUNDS):
                for mode in ("before", "after"):
                    with one_shared_pool() if mode == "before" else contextlib.nullcontext():
                        for searching in (False, True):
                            seen.setdefault((mode, searching), []).extend(
                                await write_latencies(http, searching, phrase)
                            )
    words = len(parse_query(phrase).terms[0].words)
    rows: list[tuple[object, ...]] = []
    for mode in ("before", "after"):
        idle, busy = seen[(mode, False)], seen[(mode, True)]
        rows.append(
            (
                "SQLite",
                f"{mode}: {'one shared pool' if mode == 'before' else 'a pool per kind of work'}",
                f"{statistics.median(idle) * 1000:.1f}",
                f"{statistics.median(busy) * 1000:.1f}",
                f"{max(busy) * 1000:.0f}",
                f"{statistics.median(busy) / statistics.median(idle):.1f}x",
            )
        )
    rows.append(("", f"({SEARCHERS} clients searching a phrase of {words} words)", "", "", "", ""))
    return rows


def big_documents() -> list[tuple[str, str]]:
    rng = random.Random(3)
    vocabulary = [f"w{n}" for n in range(5000)]
    found = []
    for index in range(BIG):
        words = " ".join(rng.choices(vocabulary, k=BIG_CHARS // 6))
        middle = len(words) // 2
        found.append((f"big/{index}", f"Big {index}\n{words[:middle]} bigzz {words[middle:]}"))
        found.append((f"small/{index}", f"Small {index}\n{' '.join(rng.choices(vocabulary, k=300))} smallzz"))
    return found


@contextlib.contextmanager
def patched(module: Any, **values: int) -> Iterator[None]:
    """``module``'s constants set to ``values`` for the time of the block."""
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


@contextlib.contextmanager
def whole_text_snippets() -> Iterator[None]:
    """Snippets made over each hit's whole text, as before (the window as large as any document)."""
    whole = 1 << 30
    with (
        patched(sqlite_documents, SNIPPET_SCAN=whole),
        patched(pg_documents, SNIPPET_SCAN=whole, LEAD_CHARS=0, WINDOW_CHARS=whole),
    ):
        yield


async def search_ms(facet: DocumentsFacet, word: str) -> float:
    started = time.perf_counter()
    hits = await facet.search(SPACE, parse_query(word), PathFilter(), BIG)
    assert len(hits) == BIG, (word, len(hits))
    return (time.perf_counter() - started) * 1000


async def big_hits(name: str, url: str) -> list[tuple[object, ...]]:
    database = open_database(url)
    try:
        facet = await database.documents()
        await fill(facet, big_documents())
        seen: dict[tuple[str, str], list[float]] = {}
        for _ in range(ROUNDS):
            for mode in ("before", "after"):
                with whole_text_snippets() if mode == "before" else contextlib.nullcontext():
                    for word in ("smallzz", "bigzz"):
                        seen.setdefault((mode, word), []).append(await search_ms(facet, word))
    finally:
        await database.aclose()
    rows: list[tuple[object, ...]] = []
    for mode in ("before", "after"):
        small, big = (statistics.median(seen[(mode, word)]) for word in ("smallzz", "bigzz"))
        label = "snippet over the whole text" if mode == "before" else "snippet from a window"
        rows.append((name, f"{mode}: {label}", f"{small:.1f}", f"{big:.1f}", f"{big / small:.0f}x"))
    return rows


async def _all(corpus: Corpus) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    isolated = await isolation(corpus)
    with tempfile.TemporaryDirectory() as folder:
        costs = await big_hits("SQLite", f"sqlite:///{Path(folder) / 'big.db'}")
    with pg_schema() as url:
        costs += await big_hits("PostgreSQL", url)
    return isolated, costs


def run() -> str:
    isolated, costs = asyncio.run(_all(Corpus()))
    return "\n".join(
        [
            "## Memory: what a search costs others",
            "",
            __doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
            "",
            f"**Isolation**: a 100 KB write's latency, ms (median of {ROUNDS * WRITES}; the worst under searches).",
            "",
            table(("store", "pools", "idle", "under searches", "worst", "slowed"), isolated),
            "",
            f"**Big hits**: one search of {BIG} hits, ms (median of {ROUNDS}).",
            "",
            table(("store", "snippets", f"{BIG} hits of ~2 KB", f"{BIG} hits of ~1 MB", "1 MB / 2 KB"), costs),
        ]
    )
