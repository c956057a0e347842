"""Logs of the harness store, on every backend it runs on (rows of ``SMALL_CHUNK`` bytes)."""

from __future__ import annotations

import time

import pytest
from harness_support import HARNESS_BACKENDS, SMALL_CHUNK

from keepstate.errors import InvalidRequest
from keepstate.harness import HarnessStore, LogAppend
from keepstate.stores.sql.harness_rows import split_chunks

pytestmark = pytest.mark.parametrize("backend_url", HARNESS_BACKENDS, indirect=True)

# Characters of 1, 2, 3 and 4 UTF-8 bytes (and a UTF-16 surrogate pair), so row boundaries
# fall inside characters at every offset.
TRICKY = "a é 中 😀 👩‍👩‍👧 ü\u2028 " * 9


def data_of(store: HarnessStore, session: str, log: str) -> list[object]:
    return [entry.data for entry in store.read(session, log)]


def test_append_keeps_order_and_returns_the_last_position(store: HarnessStore) -> None:
    assert store.end("s", "messages") == 0
    assert store.append("s", "messages", [LogAppend({"n": 1}), LogAppend({"n": 2})]) == 2
    assert store.append("s", "messages", [LogAppend({"n": 3})]) == 3
    entries = store.read("s", "messages")
    assert [(e.seq, e.id, e.data) for e in entries] == [(1, None, {"n": 1}), (2, None, {"n": 2}), (3, None, {"n": 3})]
    assert store.end("s", "messages") == 3
    assert store.append("s", "messages", []) == 3


def test_an_existing_id_is_replaced_in_place(store: HarnessStore) -> None:
    store.append("s", "messages", [LogAppend("first", id="m1"), LogAppend("second", id="m2"), LogAppend("third")])
    before = store.entry("s", "messages", "m1")
    assert store.append("s", "messages", [LogAppend({"text": TRICKY}, id="m1")]) == 1
    after = store.entry("s", "messages", "m1")
    assert before is not None and after is not None
    assert (after.seq, after.id, after.data, after.created_at) == (1, "m1", {"text": TRICKY}, before.created_at)
    assert data_of(store, "s", "messages") == [{"text": TRICKY}, "second", "third"]
    assert store.end("s", "messages") == 3


def test_one_append_mixing_new_entries_and_replacements(store: HarnessStore) -> None:
    store.append("s", "log", [LogAppend("a", id="x")])
    assert (
        store.append(
            "s", "log", [LogAppend("b"), LogAppend("a2", id="x"), LogAppend("c", id="y"), LogAppend("c2", id="y")]
        )
        == 3
    )
    assert [(e.seq, e.id, e.data) for e in store.read("s", "log")] == [(1, "x", "a2"), (2, None, "b"), (3, "y", "c2")]


def test_read_pages_in_order(store: HarnessStore) -> None:
    store.append("s", "log", [LogAppend({"n": n, "text": TRICKY[: n * 3]}) for n in range(1, 11)])
    pages, after = [], 0
    while page := store.read("s", "log", after=after, limit=3):
        pages.append([e.seq for e in page])
        after = page[-1].seq
    assert pages == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]
    assert [e.data["n"] for e in store.read("s", "log", after=4)] == [5, 6, 7, 8, 9, 10]
    assert store.read("s", "log", limit=0) == []
    assert store.read("s", "log", after=10) == []
    with pytest.raises(InvalidRequest):
        store.read("s", "log", after=-1)


def test_logs_are_kept_per_session_and_name(store: HarnessStore) -> None:
    store.append("s1", "messages", [LogAppend("s1-m", id="same")])
    store.append("s1", "engine", [LogAppend("s1-e", id="same"), LogAppend("s1-e2")])
    store.append("s2", "messages", [LogAppend("s2-m", id="same")])
    assert data_of(store, "s1", "messages") == ["s1-m"]
    assert data_of(store, "s1", "engine") == ["s1-e", "s1-e2"]
    assert data_of(store, "s2", "messages") == ["s2-m"]
    entry = store.entry("s2", "messages", "same")
    assert entry is not None and entry.data == "s2-m"
    assert store.entry("s2", "engine", "same") is None


def test_clear_empties_one_log(store: HarnessStore) -> None:
    store.append("s", "messages", [LogAppend("a", id="a"), LogAppend("b")])
    store.append("s", "engine", [LogAppend("e")])
    store.clear("s", "messages")
    assert store.read("s", "messages") == [] and store.end("s", "messages") == 0
    assert store.entry("s", "messages", "a") is None
    assert data_of(store, "s", "engine") == ["e"]
    assert store.append("s", "messages", [LogAppend("again", id="a")]) == 1


def test_copy_appends_the_source_keeping_ids(store: HarnessStore) -> None:
    store.append("parent", "messages", [LogAppend("p1", id="a"), LogAppend({"t": TRICKY}), LogAppend("p3", id="c")])
    store.append("fork", "messages", [LogAppend("own")])
    store.copy("parent", "fork", "messages")
    entries = store.read("fork", "messages")
    assert [(e.seq, e.id, e.data) for e in entries] == [
        (1, None, "own"),
        (2, "a", "p1"),
        (3, None, {"t": TRICKY}),
        (4, "c", "p3"),
    ]
    source = store.read("parent", "messages")
    assert [e.created_at for e in entries[1:]] == [e.created_at for e in source]
    assert store.end("fork", "messages") == 4
    assert len(store.read("parent", "messages")) == 3


def test_copy_replaces_entries_whose_id_the_target_has(store: HarnessStore) -> None:
    store.append("parent", "messages", [LogAppend("new a", id="a"), LogAppend("new b", id="b")])
    store.append("fork", "messages", [LogAppend("old b", id="b"), LogAppend("plain")])
    store.copy("parent", "fork", "messages")
    assert [(e.seq, e.id, e.data) for e in store.read("fork", "messages")] == [
        (1, "b", "new b"),
        (2, None, "plain"),
        (3, "a", "new a"),
    ]
    store.copy("parent", "fork", "messages")
    assert store.end("fork", "messages") == 3


def test_copy_of_an_empty_log_changes_nothing(store: HarnessStore) -> None:
    store.append("fork", "messages", [LogAppend("own")])
    store.copy("absent", "fork", "messages")
    assert data_of(store, "fork", "messages") == ["own"]
    store.copy("absent", "other", "messages")
    assert store.end("other", "messages") == 0


def test_an_entry_larger_than_a_row_reads_back_whole(store: HarnessStore) -> None:
    values = [TRICKY, {"nested": [TRICKY, {"k😀": TRICKY[::-1]}]}, "x" * (SMALL_CHUNK * 3), "😀" * 50]
    assert any(not _decodes(chunk) for chunk in split_chunks(TRICKY.encode(), SMALL_CHUNK))  # really splits chars
    store.append("s", "big", [LogAppend(value, id=f"v{n}") for n, value in enumerate(values)])
    assert data_of(store, "s", "big") == values
    for n, value in enumerate(values):
        entry = store.entry("s", "big", f"v{n}")
        assert entry is not None and entry.data == value
    assert [e.data for e in store.read("s", "big", after=1, limit=2)] == values[1:3]


def test_a_large_entry_shrinking_on_replace_leaves_no_stale_rows(store: HarnessStore) -> None:
    store.append("s", "log", [LogAppend(TRICKY, id="a"), LogAppend("after")])
    store.append("s", "log", [LogAppend("tiny", id="a")])
    assert data_of(store, "s", "log") == ["tiny", "after"]
    store.append("s", "log", [LogAppend(TRICKY * 2, id="a")])
    assert data_of(store, "s", "log") == [TRICKY * 2, "after"]


def _decodes(chunk: bytes) -> bool:
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_an_id_given_twice_in_one_append_keeps_its_first_place(store: HarnessStore) -> None:
    store.append("s", "log", [LogAppend("old", id="z")])
    assert store.append("s", "log", [LogAppend("a", id="x"), LogAppend(TRICKY), LogAppend("a2", id="x")]) == 2
    assert store.append("s", "log", [LogAppend("z2", id="z"), LogAppend(TRICKY * 2, id="x")]) == 2
    assert [(e.seq, e.id, e.data) for e in store.read("s", "log")] == [
        (1, "z", "z2"),
        (2, "x", TRICKY * 2),
        (3, None, TRICKY),
    ]
    assert store.end("s", "log") == 3


def test_copy_keeps_the_creation_times_of_entries_without_ids(store: HarnessStore) -> None:
    store.append("parent", "log", [LogAppend("one"), LogAppend(TRICKY)])
    time.sleep(0.01)
    store.copy("parent", "fork", "log")
    copied, source = store.read("fork", "log"), store.read("parent", "log")
    assert [(e.seq, e.data, e.created_at) for e in copied] == [(e.seq, e.data, e.created_at) for e in source]
