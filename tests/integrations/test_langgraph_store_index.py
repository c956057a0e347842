"""KeepstateStore and AsyncKeepstateStore searching by meaning (``index=``), on every backend.

LangGraph's own vector tests (langgraph-checkpoint-sqlite's, in test_upstream_suites.py) run on a
SQLite file; these prove the same on memory, SQLite, PostgreSQL and Redis with a deterministic
embedding function (tests/meaning.py): scores are the cosine similarity of an item's nearest field,
the vectors ride in the item's own write and never show in its value, and a rewrite replaces them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest

import keepstate
import meaning
from backends import declaring
from keepstate.integrations.langgraph.store import AGENT, SESSION, AsyncKeepstateStore, KeepstateStore

EVERY_BACKEND = pytest.mark.parametrize("backend_url", declaring(), indirect=True)
INDEX = {"dims": meaning.DIMS, "embed": meaning.concepts, "fields": ["text", "summary"]}


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


@pytest.fixture
def opened(backend_url: str) -> Iterator[keepstate.Store]:
    with keepstate.open(backend_url) as store:
        yield store


@EVERY_BACKEND
def test_a_search_by_meaning_ranks_by_the_nearest_field(opened: keepstate.Store) -> None:
    store = KeepstateStore.from_store(opened, index=INDEX)
    store.put(("notes", "ada"), "trip", {"text": "The trip was called off.", "summary": "storm"})
    store.put(("notes", "ada"), "food", {"text": "Vegetarian meals only."})
    store.put(("notes", "ada"), "plain", {"text": "flight cancelled"}, index=False)
    store.put(("notes", "bob"), "trip", {"text": "Bob's flight was scrapped."})
    hits = store.search(("notes", "ada"), query="flight cancelled")
    assert [hit.key for hit in hits] == ["trip", "food", "plain"]  # the unindexed one last, unscored
    query = meaning.vector("flight cancelled")
    expected = max(cosine(query, meaning.vector(text)) for text in ("The trip was called off.", "storm"))
    assert hits[0].score == pytest.approx(expected, abs=1e-5) and hits[2].score is None
    assert hits[0].value == {"text": "The trip was called off.", "summary": "storm"}  # no vectors in it
    assert [hit.key for hit in store.search(("notes",), query="flight cancelled", limit=2)] == ["trip", "trip"]
    assert [
        hit.namespace for hit in store.search(("notes",), query="cancelled", filter={"text": "Vegetarian meals only."})
    ] == [("notes", "ada")]


@EVERY_BACKEND
def test_a_rewrite_replaces_the_vectors_in_the_same_write(opened: keepstate.Store) -> None:
    store = KeepstateStore.from_store(opened, index=INDEX)
    store.put(("notes",), "x", {"text": "a jazz concert"})
    before = store.search(("notes",), query="music")[0].score
    store.put(("notes",), "x", {"text": "a refund was paid"})
    [after] = store.search(("notes",), query="music")
    assert before is not None and after.score is not None and after.score < before
    assert store.search(("notes",), query="money back")[0].score == pytest.approx(
        cosine(meaning.vector("money back"), meaning.vector("a refund was paid")), abs=1e-5
    )
    stored = opened.scope("session", agent=AGENT, id=SESSION).get("notes:x")
    assert isinstance(stored["vectors"], str) and stored["value"] == {"text": "a refund was paid"}


@EVERY_BACKEND
def test_the_async_store_searches_by_meaning_too(backend_url: str) -> None:
    async def scenario() -> list[tuple[str, float | None]]:
        async with AsyncKeepstateStore(backend_url, index=INDEX) as store:
            await store.aput(("notes",), "trip", {"text": "The journey was scrapped."})
            await store.aput(("notes",), "cat", {"text": "The cat sleeps."})
            return [(hit.key, hit.score) for hit in await store.asearch(("notes",), query="flight cancelled")]

    found = asyncio.run(scenario())
    assert [key for key, _ in found] == ["trip", "cat"] and found[0][1] is not None and found[0][1] > 0.9


def test_without_an_index_a_query_is_ignored() -> None:
    with KeepstateStore("memory://") as store:
        store.put(("notes",), "a", {"text": "flight"})
        [hit] = store.search(("notes",), query="anything")
        assert hit.score is None and store.index_config is None
