"""The memory contract, run on every backend declaring documents: a backend that passes this is correct.

Driven through the public embedded API (``keepstate.open(url).memory(agent, user)``), which
exercises the sync face and the rules of ``keepstate.platform.memory``, plus the async face directly
(``Database.documents()``). No test branches on the backend.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keepstate
from backends import declaring
from keepstate.memory import Memory
from keepstate.search import parse_query
from keepstate.stores import open_database
from keepstate.stores.documents import DocumentRecord, PathFilter

pytestmark = pytest.mark.parametrize("backend_url", declaring("documents"), indirect=True)


@pytest.fixture
def memory(store: keepstate.Store) -> Memory:
    return store.memory("chat", user="alice")


def paths(memory: Memory, prefix: str = "") -> list[str]:
    return [info.path for info in memory.list(prefix)]


# ---------------------------------------------------------------- documents and versions


def test_absent_document_reads_as_none(memory: Memory) -> None:
    assert memory.read("notes/nothing") is None


def test_text_and_metadata_round_trip_exactly(memory: Memory) -> None:
    text = 'Title line ✓\n\nbody with "quotes", tabs\t and a trailing newline\n'
    memory.write("notes/a", text, {"source": "crm", "tags": ["x"], "n": 3})
    memory.write("notes/one-line", "no newline at all")
    memory.write("notes/empty", "")
    found = memory.read("notes/a")
    assert found is not None
    assert (found.path, found.text, found.metadata, found.version) == (
        "notes/a",
        text,
        {"source": "crm", "tags": ["x"], "n": 3},
        1,
    )
    assert found.updated_at > 0
    one_line, empty = memory.read("notes/one-line"), memory.read("notes/empty")
    assert one_line is not None and one_line.text == "no newline at all" and one_line.metadata == {}
    assert empty is not None and empty.text == ""


def test_a_write_replaces_text_and_metadata(memory: Memory) -> None:
    memory.write("doc", "first", {"a": 1})
    memory.write("doc", "second")
    found = memory.read("doc")
    assert found is not None and (found.text, found.metadata, found.version) == ("second", {}, 2)


def test_versions_grow_by_one_and_never_repeat_after_delete(memory: Memory) -> None:
    assert memory.write("doc", "1") == 1
    assert memory.write("doc", "2") == 2
    memory.delete("doc")
    assert memory.read("doc") is None
    assert memory.write("doc", "3") == 3
    memory.delete("doc")
    memory.delete("doc")  # absent: nothing happens
    assert memory.write("doc", "4", if_version=0) == 4


def test_if_version_guards_writes_and_deletes(memory: Memory) -> None:
    assert memory.write("doc", "first", if_version=0) == 1
    with pytest.raises(keepstate.VersionConflict) as taken:
        memory.write("doc", "second", if_version=0)
    assert taken.value.current_version == 1
    with pytest.raises(keepstate.VersionConflict) as stale:
        memory.write("doc", "second", if_version=5)
    assert stale.value.current_version == 1
    assert memory.write("doc", "second", if_version=1) == 2
    with pytest.raises(keepstate.VersionConflict) as stale_delete:
        memory.delete("doc", if_version=1)
    assert stale_delete.value.current_version == 2
    found = memory.read("doc")
    assert found is not None and found.text == "second"
    memory.delete("doc", if_version=2)
    with pytest.raises(keepstate.VersionConflict) as gone:
        memory.write("doc", "third", if_version=2)
    assert gone.value.current_version == 0
    memory.delete("doc", if_version=0)  # absent, as asked: nothing to do


# ---------------------------------------------------------------- listing


def test_listing_is_in_path_order_across_pages_and_by_prefix(memory: Memory) -> None:
    names = [f"kb/{n:03d}" for n in range(105)]
    for name in reversed(names):
        memory.write(name, name)
    memory.write("kb-other", "x")
    memory.write("notes/x", "x")
    memory.write("notes/x", "x again")
    assert paths(memory, "kb/") == names
    assert paths(memory, "kb")[0] == "kb-other"  # "-" sorts before "/": byte order
    listed = list(memory.list("notes/"))
    assert [(info.path, info.version) for info in listed] == [("notes/x", 2)]
    memory.delete("kb/000")
    assert paths(memory, "kb/")[0] == "kb/001"
    assert paths(memory, "nothing/") == []


def test_listing_prefix_is_a_plain_string_prefix(memory: Memory) -> None:
    for name in ("a/b", "a/bc", "a/b/c", "ab"):
        memory.write(name, name)
    assert paths(memory, "a/b") == ["a/b", "a/b/c", "a/bc"]
    assert paths(memory, "a/b/") == ["a/b/c"]
    assert paths(memory, "a") == ["a/b", "a/b/c", "a/bc", "ab"]


# ---------------------------------------------------------------- paths


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "/a",
        "a/",
        "a//b",
        "./a",
        "a/./b",
        "a/../b",
        "..",
        ".",
        "a b",
        "ä",
        "a\\b",
        "a%2Fb",
        "{user}",
        "notes/{user}/x",
        "a\x00b",
        "x" * 513,
        "users",
        "users/alice",
        "Users/alice/x",
        "USERS/x",
        "uSeRs",
    ],
)
def test_malformed_paths_are_refused(memory: Memory, bad: str) -> None:
    with pytest.raises(keepstate.InvalidRequest):
        memory.write(bad, "text")


def test_every_path_character_and_the_length_limit(memory: Memory) -> None:
    longest = "/".join(["a" * 99] * 5) + "/" + "b" * 12
    assert len(longest) == 512
    for path in ("A-Za-z0-9._-/x", longest, "users.txt", "usersX/y", "...", ".hidden/..x"):
        memory.write(path, path)
        found = memory.read(path)
        assert found is not None and found.text == path


# ---------------------------------------------------------------- the users/{user}/ folder


def test_the_user_placeholder_is_the_users_own_folder(store: keepstate.Store, memory: Memory) -> None:
    memory.write("users/{user}/prefs", "likes tea")
    found = memory.read("users/alice/prefs")
    assert found is not None and found.path == "users/alice/prefs" and found.text == "likes tea"
    assert memory.write("users/alice/prefs", "likes coffee") == 2
    assert paths(memory, "users/{user}/") == ["users/alice/prefs"]


def test_one_users_folder_never_reaches_another(store: keepstate.Store, memory: Memory) -> None:
    memory.write("users/{user}/secret", "alice's refund code")
    memory.write("shared", "everyone's refund policy")
    bob = store.memory("chat", user="bob")
    assert bob.read("users/alice/secret") is None
    with pytest.raises(keepstate.NotFound):
        bob.write("users/alice/secret", "overwritten")
    with pytest.raises(keepstate.NotFound):
        bob.delete("users/alice/secret")
    with pytest.raises(keepstate.NotFound):
        list(bob.list("users/alice/"))
    with pytest.raises(keepstate.NotFound):
        bob.search("refund", prefix="users/alice/")
    assert paths(bob) == ["shared"]
    assert paths(bob, "users/") == []
    assert [hit.path for hit in bob.search("refund")] == ["shared"]
    found = memory.read("users/alice/secret")
    assert found is not None and found.text == "alice's refund code" and found.version == 1


def test_user_folders_are_case_sensitive(store: keepstate.Store) -> None:
    lower, upper = store.memory("chat", user="bob"), store.memory("chat", user="Bob")
    lower.write("users/{user}/note", "lower bob's note")
    upper.write("users/{user}/note", "upper Bob's note")
    assert paths(lower) == ["users/bob/note"] and paths(upper) == ["users/Bob/note"]
    assert [hit.path for hit in lower.search("note")] == ["users/bob/note"]
    assert upper.read("users/bob/note") is None


def test_a_run_without_a_user_has_no_folder(store: keepstate.Store, memory: Memory) -> None:
    memory.write("users/{user}/secret", "alice's")
    anonymous = store.memory("chat")
    with pytest.raises(keepstate.NoUser):
        anonymous.write("users/{user}/x", "x")
    with pytest.raises(keepstate.NoUser):
        list(anonymous.list("users/{user}/"))
    assert anonymous.read("users/alice/secret") is None
    assert paths(anonymous) == []
    assert anonymous.search("alice") == []


def test_agents_and_environments_have_their_own_memory(store: keepstate.Store, memory: Memory) -> None:
    memory.write("doc", "chat's document")
    assert store.memory("other", user="alice").read("doc") is None
    assert store.memory("chat", user="alice", env="staging").read("doc") is None
    assert store.memory("chat").read("doc") is not None


# ---------------------------------------------------------------- values


def test_values_over_their_limits_are_refused(memory: Memory) -> None:
    with pytest.raises(keepstate.TooLarge):
        memory.write("big", "x" * (1024 * 1024 + 1))
    with pytest.raises(keepstate.TooLarge):
        memory.write("big", "é" * (512 * 1024 + 1))  # 2 bytes each in UTF-8
    with pytest.raises(keepstate.TooLarge):
        memory.write("meta", "x", {"blob": "m" * 16 * 1024})
    with pytest.raises(keepstate.InvalidRequest):
        memory.write("meta", "x", ["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(keepstate.InvalidValue):
        memory.write("nul", "a\x00b")
    with pytest.raises(keepstate.InvalidValue):
        memory.write("meta", "x", {"bad": float("nan")})
    with pytest.raises(keepstate.InvalidRequest):
        memory.write("text", 42)  # type: ignore[arg-type]
    assert memory.read("big") is None and memory.read("meta") is None
    memory.write("max", "x" * (1024 * 1024))


def test_a_huge_vocabulary_is_stored_and_found_or_refused_whole(memory: Memory) -> None:
    """~1 MiB of distinct words may pass what an engine can index (PostgreSQL's tsvector): then it is
    TooLarge with nothing written, never a driver error; else it is found like any document."""
    words = [uuid.uuid4().hex[:8] for _ in range(110_000)]
    try:
        memory.write("vocabulary", " ".join(words))
    except keepstate.TooLarge:
        assert memory.read("vocabulary") is None
        return
    assert [hit.path for hit in memory.search(words[5000])] == ["vocabulary"]


# ---------------------------------------------------------------- search


@pytest.fixture
def library(memory: Memory) -> Memory:
    memory.write("kb/refunds", "Refund policy\nCustomers get their money back within 30 days.")
    memory.write("kb/shipping", "Shipping times\nParcels arrive in five days; a refund is possible when late.")
    memory.write("kb/running", "Training plan\nThe runner runs every morning, running ten kilometres.")
    memory.write("kb/fox", "Pangram\nThe quick brown fox jumps over the lazy dog.")
    memory.write("kb/fox-apart", "Scrambled\nThe brown dog is quick; a fox sleeps.")
    memory.write("other/refund", "Refund notes\nAnother refund document outside kb.")
    return memory


def test_a_first_line_match_ranks_above_a_passing_mention(library: Memory) -> None:
    hits = library.search("refund", prefix="kb/")
    assert [hit.path for hit in hits] == ["kb/refunds", "kb/shipping"]
    assert hits[0].score > hits[1].score
    assert all(hit.version == 1 for hit in hits)


def test_words_match_across_case_and_inflection(library: Memory) -> None:
    assert [hit.path for hit in library.search("RUNS")] == ["kb/running"]
    assert [hit.path for hit in library.search("running")] == ["kb/running"]
    assert library.search("refunds", prefix="kb/")[0].path == "kb/refunds"
    assert [hit.path for hit in library.search("parcel")] == ["kb/shipping"]


def test_every_word_must_match(library: Memory) -> None:
    assert [hit.path for hit in library.search("refund parcels")] == ["kb/shipping"]
    assert library.search("refund pangram") == []


def test_phrases_match_words_in_a_row(library: Memory) -> None:
    assert [hit.path for hit in library.search('"quick brown fox"')] == ["kb/fox"]
    assert sorted(hit.path for hit in library.search("quick brown fox")) == ["kb/fox", "kb/fox-apart"]
    assert [hit.path for hit in library.search('dog "brown fox"')] == ["kb/fox"]
    assert library.search('"fox brown quick"') == []


def test_snippets_mark_the_matched_words(library: Memory) -> None:
    [hit] = library.search("parcels")
    assert "**Parcels**" in hit.snippet and "\n" not in hit.snippet


def test_stop_words_alone_find_nothing_and_never_block_a_match(library: Memory) -> None:
    assert library.search("the of and") == []
    assert library.search("what is the refund policy")[0].path == "kb/refunds"


def test_search_sees_writes_and_deletes(library: Memory) -> None:
    library.write("kb/fox", "Pangram\nSphinx of black quartz, judge my vow.")
    assert [hit.path for hit in library.search("quartz")] == ["kb/fox"]
    assert [hit.path for hit in library.search('"quick brown fox"')] == []
    library.delete("kb/fox")
    assert library.search("quartz") == []


def test_limit_and_prefix(library: Memory) -> None:
    assert len(library.search("refund", limit=1)) == 1
    assert [hit.path for hit in library.search("refund", prefix="other/")] == ["other/refund"]
    assert len(library.search("refund", limit=500)) == 3  # clamped to 50, not refused
    with pytest.raises(keepstate.InvalidRequest):
        library.search("refund", limit=0)


@pytest.mark.parametrize(
    "bad", ['refund "policy', '""', '"   "', "", "   ", "!!! ???", "x" * 1001, " ".join(f"w{n}" for n in range(33))]
)
def test_malformed_queries_are_invalid_requests(library: Memory, bad: str) -> None:
    with pytest.raises(keepstate.InvalidRequest):
        library.search(bad)


@pytest.mark.parametrize(
    "query",
    [
        "refund*",
        "NOT refund",
        "refund OR x",
        "-refund",
        "title:refund",
        "^refund",
        "NEAR(refund policy)",
        "refund AND",
        "(refund",
        "refund)",
        "{refund}",
        "'refund'",
        "refund:*",
        "refund & policy",
        "refund | !policy",
        "refund <-> policy",
    ],
)
def test_engine_syntax_is_plain_words(library: Memory, query: str) -> None:
    """Operators of FTS5 and tsquery are words and punctuation here: never an error, never an operator."""
    hits = library.search(query)
    assert all(isinstance(hit.path, str) for hit in hits)
    if query in ("refund*", "-refund", "^refund", "(refund", "'refund'", "{refund}", "refund:*"):
        assert "kb/refunds" in [hit.path for hit in hits]


@given(query=st.text(max_size=60))
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_text_is_a_query_or_an_invalid_request(library: Memory, query: str) -> None:
    try:
        hits = library.search(query)
    except keepstate.InvalidRequest:
        return
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


# ---------------------------------------------------------------- the async face


async def test_the_async_face_keeps_the_same_contract(backend_url: str) -> None:
    database = open_database(backend_url)
    try:
        facet = await database.documents()
        assert await facet.write("env/agent", "a/doc", "Alpha title\nbody words", b'{"k":1}', None, 5) == 1
        assert await facet.write("env/agent", "a/doc", "Alpha title\nbody words", b"{}", 1, 6) == 2
        with pytest.raises(keepstate.VersionConflict):
            await facet.write("env/agent", "a/doc", "x", b"{}", 0, 7)
        await facet.write("env/agent", "users/u1/doc", "alpha of u1", b"{}", None, 8)
        await facet.write("env/agent", "users/u2/doc", "alpha of u2", b"{}", None, 9)
        await facet.write("env/other", "a/doc", "alpha elsewhere", b"{}", None, 9)
        found = await facet.read("env/agent", "a/doc")
        assert found is not None and (found.version, found.updated_at, found.metadata) == (2, 6, b"{}")
        where = PathFilter("", "users/", "users/u1/")
        listed = await facet.listing("env/agent", where, "", 10)
        assert [head.path for head in listed] == ["a/doc", "users/u1/doc"]
        hits = await facet.search("env/agent", parse_query("alpha"), where, 10)
        assert sorted(hit.path for hit in hits) == ["a/doc", "users/u1/doc"]
        assert await facet.delete("env/agent", "a/doc", 2) is True
        assert await facet.delete("env/agent", "a/doc", None) is False
        assert await facet.read("env/agent", "a/doc") is None
    finally:
        await database.aclose()


async def test_a_listing_gives_each_document_s_size_in_bytes(backend_url: str) -> None:
    database = open_database(backend_url)
    try:
        facet = await database.documents()
        texts = {"s/ascii": "one line", "s/lines": "Title\nbody\n", "s/utf8": "é ✓\nnaïve", "s/empty": ""}
        for path, text in texts.items():
            await facet.write("env/sizes", path, text, b"{}", None, 1)
        listed = await facet.listing("env/sizes", PathFilter("s/"), "", 10)
        assert {head.path: head.size for head in listed} == {p: len(t.encode()) for p, t in texts.items()}
    finally:
        await database.aclose()


async def test_records_and_restore_keep_versions_and_tombstones(backend_url: str) -> None:
    database = open_database(backend_url)
    try:
        facet = await database.documents()
        await facet.write("env/rec", "a/kept", "Kept\nbody", b'{"k":1}', None, 5)
        await facet.write("env/rec", "a/kept", "Kept again", b"{}", None, 6)
        await facet.write("env/rec", "a/gone", "Gone", b"{}", None, 7)
        await facet.delete("env/rec", "a/gone", None)
        mine = [record async for record in facet.records() if record.space == "env/rec"]
        assert [(r.path, r.version, r.text, r.updated_at) for r in mine] == [
            ("a/gone", 1, None, 7),
            ("a/kept", 2, "Kept again", 6),
        ]
        moved = [DocumentRecord("env/moved", r.path, r.version, r.text, r.metadata, r.updated_at) for r in mine]
        for record in moved:
            await facet.restore(record)
        assert [record async for record in facet.records() if record.space == "env/moved"] == moved
        assert await facet.read("env/moved", "a/gone") is None
        assert await facet.write("env/moved", "a/gone", "Back", b"{}", 0, 8) == 2
        hits = await facet.search("env/moved", parse_query("kept"), PathFilter(), 10)
        assert [hit.path for hit in hits] == ["a/kept"]
    finally:
        await database.aclose()


def test_the_sync_face_gives_and_restores_the_same_records(store: keepstate.Store) -> None:
    facet = store.database.sync_documents()
    facet.write("env/sync-rec", "a/one", "One\nbody", b'{"k":2}', None, 3)
    facet.write("env/sync-rec", "a/two", "Two", b"{}", None, 4)
    facet.delete("env/sync-rec", "a/two", None)
    mine = [record for record in facet.records() if record.space == "env/sync-rec"]
    assert [(r.path, r.version, r.text, r.metadata) for r in mine] == [
        ("a/one", 1, "One\nbody", b'{"k":2}'),
        ("a/two", 1, None, b"{}"),
    ]
    for record in mine:
        facet.restore(
            DocumentRecord(
                "env/sync-copy", record.path, record.version, record.text, record.metadata, record.updated_at
            )
        )
    copied = [record for record in facet.records() if record.space == "env/sync-copy"]
    assert [(r.path, r.version, r.text) for r in copied] == [(r.path, r.version, r.text) for r in mine]


def test_a_long_document_s_snippet_comes_from_a_window_of_its_beginning(memory: Memory) -> None:
    filler = " ".join(f"w{n % 997}" for n in range(120_000))  # ~650 KB of other words
    memory.write("long/near", f"A long report\n{filler[:3000]} parcelz arrived {filler}")
    memory.write("long/far", f"Another long report\n{filler} lonelyz {filler[:1000]}")
    memory.write("long/oneline", f"{filler[:5000]} parcelz on one line {filler}")
    near = {hit.path: hit for hit in memory.search("parcelz")}
    assert set(near) == {"long/near", "long/oneline"}
    for hit in near.values():
        assert "**parcelz**" in hit.snippet and "\n" not in hit.snippet and len(hit.snippet) < 400
        assert not hit.snippet.lstrip("…").startswith(("A long", "w0 w1 w2 "))  # around the match, not the start
    far = memory.search("lonelyz")
    assert [hit.path for hit in far] == ["long/far"]  # found by the index wherever the word is
    assert far[0].snippet and "\n" not in far[0].snippet and len(far[0].snippet) < 400
    assert "**" not in far[0].snippet  # the snippet read no further than the document's first 16 KB


async def test_a_document_at_the_highest_version_takes_no_more_writes(backend_url: str) -> None:
    top = keepstate.values.MAX_VERSION
    database = open_database(backend_url)
    try:
        facet = await database.documents()
        await facet.restore(DocumentRecord("env/limits", "spent", top, "Spent\nall of it", b"{}", 1))
        await facet.restore(DocumentRecord("env/limits", "near", top - 1, "Near", b"{}", 1))
        with pytest.raises(keepstate.InvalidRequest, match="highest"):
            await facet.write("env/limits", "spent", "again", b"{}", None, 2)
        assert await facet.write("env/limits", "near", "last", b"{}", None, 2) == top
        with pytest.raises(keepstate.InvalidRequest, match="highest"):
            await facet.write("env/limits", "near", "one more", b"{}", top, 3)
        kept = await facet.read("env/limits", "spent")
        assert kept is not None and (kept.text, kept.version) == ("Spent\nall of it", top)
        assert await facet.delete("env/limits", "spent", None)  # a delete keeps the version
        with pytest.raises(keepstate.InvalidRequest, match="highest"):
            await facet.write("env/limits", "spent", "anew", b"{}", 0, 4)
    finally:
        await database.aclose()
