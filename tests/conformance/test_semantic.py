"""Search by meaning, on every backend declaring documents (and PostgreSQL with pgvector's index too).

Driven through the embedded API (``keepstate.open(url, embedder=...).memory(agent, user)``) with the
deterministic embedders of ``meaning.py``; the reindex and the facet's own guards through the async
face. No test branches on the backend.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

import keepstate
import meaning
from backends import declaring, with_vector_indexes
from keepstate.embedders import Embedder, load_embedder
from keepstate.embedding import reindex
from keepstate.memory import Memory
from keepstate.passages import split_passages
from keepstate.stores import open_database
from keepstate.stores.documents import DocumentWrite, PathFilter, StoredPassage

pytestmark = pytest.mark.parametrize("backend_url", with_vector_indexes(declaring("documents")), indirect=True)
MODES = ["text", "semantic", "hybrid"]


@pytest.fixture
def store(backend_url: str) -> Iterator[keepstate.Store]:
    opened = keepstate.open(backend_url, embedder=meaning.concepts)
    yield opened
    opened.close()


@pytest.fixture
def memory(store: keepstate.Store) -> Memory:
    return store.memory("chat", user="alice")


def paths(hits: list[keepstate.Hit]) -> list[str]:
    return [hit.path for hit in hits]


def test_meaning_finds_what_words_miss(memory: Memory) -> None:
    memory.write("notes/trip", "The trip was called off because of the storm.")
    memory.write("notes/food", "Alice prefers vegetarian meals.")
    assert memory.search("flight cancelled", mode="text") == []
    [trip, food] = memory.search("flight cancelled", mode="semantic")
    assert (trip.path, trip.version, food.path) == ("notes/trip", 1, "notes/food")
    assert 0.5 < trip.score <= 1.0 + 1e-6 and trip.score > food.score
    assert trip.snippet == "The trip was called off because of the storm."
    assert paths(memory.search("flight cancelled", mode="hybrid"))[0] == "notes/trip"
    assert paths(memory.search("flight cancelled"))[0] == "notes/trip"  # hybrid, by default


def _exact(query: str, documents: dict[str, str]) -> list[tuple[str, float]]:
    """What an exact scan answers: each document as near as its nearest passage, by cosine."""
    target = meaning.vector(query)
    scored = []
    for path, text in documents.items():
        passages = [meaning.vector(text[a:b]) for a, b in split_passages(text)]
        scored.append((path, max(sum(x * y for x, y in zip(target, p, strict=True)) for p in passages)))
    return sorted(scored, key=lambda found: (-found[1], found[0]))


def test_semantic_results_equal_an_exact_scan(memory: Memory) -> None:
    words = [*" ".join(meaning.CONCEPTS.values()).split(), "alpha", "beta", "gamma", "delta", "omega"]
    rng = random.Random(7)
    documents = {}
    for index in range(40):
        paragraphs = [" ".join(rng.choices(words, k=rng.randint(3, 60))) for _ in range(rng.randint(1, 4))]
        documents[f"kb/doc{index:02d}"] = "\n\n".join(paragraphs) * rng.choice([1, 1, 8])
    for path, text in documents.items():
        memory.write(path, text)
    for query in ["flight cancelled", "vegetarian dinner refund", "jazz cat", "alpha storm omega"]:
        expected = _exact(query, documents)[:10]
        found = memory.search(query, mode="semantic", limit=10)
        assert [round(hit.score, 4) for hit in found] == [round(score, 4) for _, score in expected]
        for hit, (path, score) in zip(found, expected, strict=True):
            assert hit.path == path or math.isclose(hit.score, score, abs_tol=1e-5)  # a tie may go either way


def test_the_snippet_is_the_nearest_passage(memory: Memory) -> None:
    music = "We went to a jazz concert and the songs were good. " * 10
    travel = "The flight was scrapped, the whole trip called off by the airline. " * 10
    memory.write("notes/long", f"Diary\n\n{music}\n\n{travel}\n\nThe end.")
    [hit] = memory.search("cancelled flights", mode="semantic")
    assert "flight was scrapped" in hit.snippet and "jazz" not in hit.snippet
    assert "\n" not in hit.snippet and len(hit.snippet) <= 800


@pytest.mark.parametrize("mode", MODES)
def test_a_filter_keeps_documents_whose_metadata_has_each_field(memory: Memory, mode: str) -> None:
    memory.write("a", "flight cancelled by storm", {"kind": "event", "n": 1, "ok": True, "none": None})
    memory.write("b", "flight cancelled by storm", {"kind": "event", "n": 2.5, "ok": False})
    memory.write("c", "flight cancelled by storm", {"kind": "note", "nested": {"x": 1}})
    memory.write("d", "flight cancelled by storm")

    def found(filter: dict[str, object]) -> list[str]:
        return sorted(paths(memory.search("flight cancelled", mode=mode, filter=filter)))

    assert found({}) == ["a", "b", "c", "d"]
    assert found({"kind": "event"}) == ["a", "b"]
    assert found({"kind": "event", "n": 1.0}) == ["a"]  # a number equals itself as an integer or a float
    assert found({"n": 2.5, "ok": False}) == ["b"]
    assert found({"ok": 1}) == []  # true is not 1
    assert found({"none": None}) == ["a"]  # null is a value: a missing field is not null
    assert found({"kind": "other"}) == []
    assert found({"absent": "x"}) == []


@pytest.mark.parametrize("bad", [[], "kind", {"kind": {"x": 1}}, {"kind": [1]}, {"": 1}, {'a"b': 1}])
def test_a_malformed_filter_or_mode_is_an_invalid_request(memory: Memory, bad: object) -> None:
    with pytest.raises(keepstate.InvalidRequest):
        memory.search("flight", filter=bad)  # type: ignore[arg-type]
    with pytest.raises(keepstate.InvalidRequest):
        memory.search("flight", mode="fuzzy")


@pytest.mark.parametrize("mode", MODES)
def test_one_users_folder_never_reaches_another_in_any_mode(store: keepstate.Store, mode: str) -> None:
    alice, bob, anonymous = store.memory("chat", "alice"), store.memory("chat", "bob"), store.memory("chat")
    alice.write("users/{user}/trip", "flight cancelled for alice")
    bob.write("users/{user}/trip", "flight cancelled for bob")
    anonymous.write("shared/trip", "flight cancelled for everyone")
    assert sorted(paths(alice.search("flight cancelled", mode=mode))) == ["shared/trip", "users/alice/trip"]
    assert sorted(paths(bob.search("flight cancelled", mode=mode))) == ["shared/trip", "users/bob/trip"]
    assert paths(anonymous.search("flight cancelled", mode=mode)) == ["shared/trip"]
    assert paths(alice.search("flight cancelled", mode=mode, prefix="users/{user}/")) == ["users/alice/trip"]
    with pytest.raises(keepstate.NotFound):
        alice.search("flight cancelled", mode=mode, prefix="users/bob/")


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_rewrites_and_deletes_are_seen_at_once(memory: Memory, mode: str) -> None:
    memory.write("notes/x", "the cat sleeps")
    memory.write("notes/y", "jazz songs")
    assert paths(memory.search("kitten", mode=mode, limit=1)) == ["notes/x"]
    memory.write("notes/x", "a refund was paid")
    [rewritten] = [hit for hit in memory.search("kitten", mode="semantic") if hit.path == "notes/x"]
    assert (rewritten.version, rewritten.snippet, rewritten.score < 0.5) == (2, "a refund was paid", True)
    assert paths(memory.search("money back", mode=mode, limit=1)) == ["notes/x"]
    memory.delete("notes/x")
    assert "notes/x" not in paths(memory.search("money back", mode=mode))


def test_without_an_embedder_words_only(backend_url: str) -> None:
    with keepstate.open(backend_url) as plain:
        memory = plain.memory("chat")
        memory.write("notes/trip", "The trip was called off.")
        assert paths(memory.search("trip")) == ["notes/trip"]  # text, by default
        for mode in ("semantic", "hybrid"):
            with pytest.raises(keepstate.NoEmbedder) as refused:
                memory.search("trip", mode=mode)
            assert refused.value.status == 409 and "mode text" in refused.value.message


def test_a_query_by_meaning_is_any_text(memory: Memory) -> None:
    memory.write("notes/trip", "The trip was called off.")
    assert paths(memory.search('my "flight got cancelled', mode="semantic")) == ["notes/trip"]
    for mode in ("text", "hybrid"):
        with pytest.raises(keepstate.InvalidRequest):
            memory.search('my "flight got cancelled', mode=mode)
    for bad in ("", "   ", "x" * 1001, "a\x00b"):
        with pytest.raises(keepstate.InvalidRequest):
            memory.search(bad, mode="semantic")


def test_a_blank_document_is_embedded_with_no_passage(memory: Memory) -> None:
    memory.write("notes/blank", "  \n\n ")
    memory.write("notes/trip", "flight cancelled")
    assert paths(memory.search("flight", mode="semantic")) == ["notes/trip"]


async def _reindex(url: str, embedder: Embedder, **options: object) -> int:
    database = open_database(url)
    try:
        return await reindex(await database.documents(), embedder, **options)  # type: ignore[arg-type]
    finally:
        await database.aclose()


async def test_a_failing_embedder_loses_no_document(
    backend_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = tmp_path / "down"
    monkeypatch.setenv("KEEPSTATE_TEST_EMBEDDER_DOWN", str(down))
    down.touch()
    with keepstate.open(backend_url, embedder=meaning.flaky) as store:
        memory = store.memory("chat")
        assert memory.write("notes/trip", "The trip was called off because of the storm.") == 1
        found = memory.read("notes/trip")
        assert found is not None and found.version == 1
        assert paths(memory.search("storm", mode="text")) == ["notes/trip"]
        with pytest.raises(keepstate.Unavailable):
            memory.search("flight cancelled", mode="semantic")  # the query cannot be embedded either
        down.unlink()
        assert memory.search("flight cancelled", mode="semantic") == []  # not embedded yet: skipped
        embedder = load_embedder(meaning.flaky)
        assert embedder is not None
        assert await _reindex(backend_url, embedder, missing_only=True) == 1
        assert paths(memory.search("flight cancelled", mode="semantic")) == ["notes/trip"]
        assert await _reindex(backend_url, embedder, missing_only=True) == 0


@pytest.mark.parametrize(
    "answer",
    [[], [[1.0], [1.0]], [[float("nan"), 1.0]], [[0.0, 0.0]], [["a", "b"]], "vectors", [[True, 1.0]]],
)
def test_an_embedder_answering_out_of_shape_keeps_the_document(backend_url: str, answer: object) -> None:
    with keepstate.open(backend_url, embedder=lambda texts: answer) as store:
        memory = store.memory("chat")
        assert memory.write("notes/x", "flight") == 1
        assert paths(memory.search("flight", mode="text")) == ["notes/x"]
        with pytest.raises(keepstate.Unavailable):
            memory.search("flight", mode="semantic")


async def test_a_new_embedder_skips_documents_until_reindexed(backend_url: str) -> None:
    with keepstate.open(backend_url, embedder=meaning.concepts) as first:
        for index in range(20):
            first.memory("chat").write(f"notes/{index:02d}", f"flight cancelled number {index}")
        first.memory("chat", "alice").write("users/alice/x", "a refund")
        first.memory("other").write("notes/x", "flight")
    wide = load_embedder(meaning.wide)
    assert wide is not None
    with keepstate.open(backend_url, embedder=wide) as second:
        memory = second.memory("chat")
        assert memory.search("flight", mode="semantic") == []
        assert len(memory.search("flight", mode="text", limit=50)) == 20  # words are not affected
        steps: list[int] = []
        assert await _reindex(backend_url, wide, space="default/chat", progress=steps.append) == 21
        assert sum(steps) == 21 and max(steps) <= 16
        hits = memory.search("flight", mode="semantic", limit=50)
        assert len(hits) == 20 and all(len(hit.snippet) > 0 for hit in hits)
        assert second.memory("other").search("flight", mode="semantic") == []  # another agent: not reindexed
        assert await _reindex(backend_url, wide) == 1
        assert paths(second.memory("other").search("flight", mode="semantic")) == ["notes/x"]


async def test_passages_attach_only_to_the_version_they_were_made_from(backend_url: str) -> None:
    database = open_database(backend_url)
    try:
        facet = await database.documents()
        embedder = load_embedder(meaning.concepts)
        assert embedder is not None
        version = await facet.write("env/agent", "doc", "flight", b"{}", None, 1)
        [vector] = embedder.passages(["flight"])
        key = embedder.key_of(vector)
        passage = StoredPassage(0, 6, vector.tobytes())
        assert await facet.attach("env/agent", "doc", version + 1, key, [passage]) is False
        assert await facet.embedding_counts(key, "env/agent") == (0, 1)
        assert await facet.attach("env/agent", "doc", version, key, [passage]) is True
        assert await facet.attach("env/agent", "doc", version, key, [passage, passage]) is True  # again: replaced
        assert await facet.embedding_counts(key, None) == (1, 1)
        [hit] = await facet.nearest("env/agent", key, vector, PathFilter(), 10)
        assert (hit.path, hit.version, hit.snippet) == ("doc", version, "flight")
        with pytest.raises(keepstate.VersionConflict):  # one transaction: nothing of it is written
            await facet.write_embedded(
                DocumentWrite("env/agent", "doc", "other", b"{}", version + 5, 2), key, [passage]
            )
        [kept] = await facet.nearest("env/agent", key, vector, PathFilter(), 10)
        assert kept.version == version
        await facet.write("env/agent", "doc", "flight", b"{}", None, 2)
        assert await facet.nearest("env/agent", key, vector, PathFilter(), 10) == []
        rewritten = DocumentWrite("env/agent", "doc", "flight", b"{}", None, 3)
        assert await facet.write_embedded(rewritten, key, [passage]) == version + 2
        [again] = await facet.nearest("env/agent", key, vector, PathFilter(), 10)
        assert again.version == version + 2
        assert await facet.attach("env/agent", "doc", version, key, [passage]) is False
        await facet.write("env/agent", "doc", "flight", b"{}", None, 4)
        assert [d.path for d in await facet.unembedded(None, None, ("", ""), 10)] == ["doc"]
        await facet.delete("env/agent", "doc", None)
        assert await facet.unembedded(None, None, ("", ""), 10) == []
        assert await facet.embedding_counts(key, None) == (0, 0)
    finally:
        await database.aclose()
