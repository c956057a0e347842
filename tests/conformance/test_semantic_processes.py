"""Several real processes writing one document while another re-embeds it: passages always match the text.

Writers store the document with its passages in one transaction; the re-embedding process (another
embedder, ``meaning.wide``) attaches passages only to the version it read. Whoever wins each race,
the document's passages at the end are those of its current text, under the embedder it records.
"""

from __future__ import annotations

import asyncio
from multiprocessing.synchronize import Event

import pytest

import keepstate
import meaning
from backends import declaring, with_vector_indexes
from keepstate.embedders import load_embedder
from keepstate.embedding import reindex
from keepstate.stores import open_database
from store_workers import run_all

pytestmark = pytest.mark.parametrize(
    "backend_url", with_vector_indexes(declaring("shared", "documents")), indirect=True
)
WORDS = ["flight", "jazz", "refund"]
ROUNDS = 10


def _write(url: str, writer: int, go: Event) -> None:
    with keepstate.open(url, embedder=meaning.concepts) as store:
        memory = store.memory("race")
        go.wait(30)
        for round_ in range(ROUNDS):
            memory.write("doc", f"{WORDS[writer]} number {round_} from writer {writer}")


def _reembed(url: str, go: Event) -> None:
    wide = load_embedder(meaning.wide)
    assert wide is not None

    async def rounds() -> None:
        database = open_database(url)
        try:
            facet = await database.documents()
            for _ in range(ROUNDS * 2):
                await reindex(facet, wide)
        finally:
            await database.aclose()

    go.wait(30)
    asyncio.run(rounds())


def test_passages_always_belong_to_the_current_text(backend_url: str) -> None:
    with keepstate.open(backend_url, embedder=meaning.concepts) as store:
        store.memory("race").write("doc", "the first text")
    run_all(_race, [(backend_url, who) for who in (0, 1, -1)])
    with keepstate.open(backend_url) as plain:
        found = plain.memory("race").read("doc")
    assert found is not None and found.version == 1 + ROUNDS * 2
    hits = []
    for embedder in (meaning.concepts, meaning.wide):
        with keepstate.open(backend_url, embedder=embedder) as store:
            hits += store.memory("race").search("anything", mode="semantic")
    [hit] = hits  # embedded by exactly one of the two
    assert (hit.path, hit.version, hit.snippet) == ("doc", found.version, found.text)


def _race(url: str, who: int, go: Event) -> None:
    if who < 0:
        _reembed(url, go)
    else:
        _write(url, who, go)
