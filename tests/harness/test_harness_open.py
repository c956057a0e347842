"""Opening the harness store, and what it refuses before touching the database."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from keepstate.errors import InvalidKey, InvalidRequest, InvalidValue, TooLarge, Unavailable
from keepstate.harness import Done, LogAppend, Unanswered, open_harness_store
from keepstate.harness.records import MAX_ENTRY_BYTES
from keepstate.stores.sql.harness_rows import join_chunks, split_chunks
from keepstate.values import MAX_VALUE_BYTES


@pytest.mark.parametrize("prefix", ["_cf_harness_", "_cf_", "1abc", "a-b", "a b", "", "x" * 41, "ab;drop", None])
def test_a_prefix_that_is_not_a_plain_identifier_is_refused(prefix: object) -> None:
    with pytest.raises(InvalidRequest):
        open_harness_store("memory://", prefix=prefix)  # type: ignore[arg-type]


def test_the_cf_prefix_is_refused_with_its_own_reason() -> None:
    with pytest.raises(InvalidRequest, match="_cf_"):
        open_harness_store("memory://", prefix="_cf_x")


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "7"])
def test_a_bad_chunk_size_is_refused(size: object) -> None:
    with pytest.raises(InvalidRequest):
        open_harness_store("memory://", chunk_size=size)  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["mysql://x", "harness.db"])
def test_an_unknown_scheme_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="unknown store URL"):
        open_harness_store(url)


def test_a_store_without_a_harness_says_which_stores_have_one() -> None:
    with pytest.raises(InvalidRequest, match="memory://, sqlite:/// or postgresql://"):
        open_harness_store("redis://127.0.0.1:6379/0")


def test_an_unreachable_database_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(Unavailable):
        open_harness_store("postgresql://postgres@127.0.0.1:1/test")
    with pytest.raises(Unavailable):
        open_harness_store(f"sqlite:///{tmp_path / 'missing' / 'dir' / 'h.db'}")


def test_memory_stores_share_a_named_database_only() -> None:
    name = f"memory://{uuid.uuid4().hex}"
    with open_harness_store(name) as one, open_harness_store(name) as two, open_harness_store("memory://") as alone:
        one.create_session(id="s")
        assert two.session("s") is not None
        assert alone.session("s") is None


def test_opening_twice_applies_the_schema_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    for _ in range(2):
        open_harness_store(url, prefix="a_").close()
    open_harness_store(url, prefix="b_").close()
    with sqlite3.connect(tmp_path / "h.db") as conn:
        versions = dict(conn.execute("SELECT component, version FROM keepstate_schema").fetchall())
    assert versions == {"harness:a_": 1, "harness:b_": 1}


def test_an_entry_spans_rows_of_chunk_size_bytes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    text = "😀é" * 20  # 120 bytes of UTF-8, 122 with the quotes
    with open_harness_store(url, chunk_size=10) as store:
        store.append("s", "log", [LogAppend(text, id="e")])
        entry = store.entry("s", "log", "e")
    assert entry is not None and entry.data == text
    with sqlite3.connect(tmp_path / "h.db") as conn:
        rows = conn.execute("SELECT part, id, length(data) FROM harness_entries ORDER BY part").fetchall()
    assert [part for part, _, _ in rows] == list(range(13))
    assert [row[1] for row in rows] == ["e"] + [None] * 12
    assert [row[2] for row in rows] == [10] * 12 + [2]


def test_split_and_join_give_back_the_same_bytes() -> None:
    data = ('"' + "a é 中 😀" * 30 + '"').encode()
    for size in (1, 2, 3, 5, 7, 64, len(data), len(data) + 1):
        chunks = split_chunks(data, size)
        assert all(0 < len(chunk) <= size for chunk in chunks)
        rows = [(1, part, "id" if part == 0 else None, chunk, 9) for part, chunk in enumerate(chunks)]
        rows += [(2, 0, None, b"[]", 10)]
        assert list(join_chunks(rows)) == [(1, "id", data, 9), (2, None, b"[]", 10)]


@pytest.mark.parametrize("bad_id", ["", "a\x00b", "\ud800", "x" * 513, 7, None])
def test_ids_and_names_are_checked(bad_id: object) -> None:
    with open_harness_store("memory://") as store:
        for call in (
            lambda: store.create_session(id=bad_id),  # type: ignore[arg-type]
            lambda: store.enqueue(session="s", id=bad_id, input=None),  # type: ignore[arg-type]
            lambda: store.append("s", bad_id, []),  # type: ignore[arg-type]
            lambda: store.append("s", "log", [LogAppend(1, id=bad_id or "")]),  # type: ignore[arg-type]
            lambda: store.start(bad_id, "op"),  # type: ignore[arg-type]
        ):
            with pytest.raises(InvalidKey):
                call()


def test_any_text_is_an_id() -> None:
    with open_harness_store("memory://") as store:
        weird = "sess/ion 1 · 😀 'quoted' ?%s"
        store.create_session(id=weird)
        assert store.enqueue(session=weird, id=weird, input=None).accepted
        assert store.append(weird, weird, [LogAppend(1, id=weird)]) == 1
        assert [s.id for s in store.sessions()] == [weird]


def test_values_follow_keepstates_json_rules() -> None:
    with open_harness_store("memory://") as store:
        with pytest.raises(InvalidValue):
            store.create_session(id="s", state={"bad": float("inf")})
        with pytest.raises(InvalidValue):
            store.enqueue(session="s", id="op", input={"big": 2**64})
        with pytest.raises(TooLarge):
            store.create_session(id="s", state="x" * MAX_VALUE_BYTES)
        with pytest.raises(InvalidValue):
            store.append("s", "log", [LogAppend({"ok": 1}), LogAppend({1, 2})])
        assert store.sessions() == [] and store.operations() == [] and store.end("s", "log") == 0


def test_an_entry_past_the_entry_limit_is_refused_and_nothing_of_its_append_is_written() -> None:
    with open_harness_store("memory://") as store:
        huge = "x" * MAX_ENTRY_BYTES  # with its quotes, two bytes past the limit
        with pytest.raises(InvalidRequest, match="over the limit"):
            store.append("s", "log", [LogAppend("fits"), LogAppend(huge)])
        assert store.end("s", "log") == 0
        assert store.append("s", "log", [LogAppend(huge[:-2])]) == 1  # exactly at the limit


def test_outcomes_and_entries_must_be_the_store_types() -> None:
    with open_harness_store("memory://") as store:
        store.enqueue(session="s", id="op", input=None)
        with pytest.raises(InvalidRequest):
            store.settle("s", "op", {"status": "done", "result": 1})  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest):
            store.settle("s", "op", Unanswered(reason=3))  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest):
            store.append("s", "log", [{"data": 1}])  # type: ignore[list-item]
        with pytest.raises(InvalidRequest):
            store.append("s", "log", LogAppend(1))  # type: ignore[arg-type]
        assert store.settle("s", "op", Done(result=[1])) is True
