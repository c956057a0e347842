"""The SQLite state store beyond the shared contract: its layout, its migration, real processes.

The conformance suites prove the rules; these tests look at what only this backend can get wrong:
segment rows found by the absolute index of their first item (a part of a list reads only the
segments holding it, trim deletes whole segments and rewrites one, pop touches the last one), the
header's size, length and base kept in step with the segments, the partial index behind sweep,
and a file written by the first schema opened and kept working by this one.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import sqlite3
from collections.abc import Iterator
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import orjson
import pytest

import keepstate
from keepstate.errors import NotAList
from keepstate.stores import open_database
from keepstate.stores.memory.state import MemoryState
from keepstate.stores.records import BatchOp, StateRecord
from keepstate.stores.sqlite import SqliteDatabase, kv
from keepstate.stores.sqlite import state as sqlite_state
from keepstate.stores.sqlite.db import SqliteFile
from keepstate.stores.sqlite.segments import SEGMENT_BYTES
from keepstate.stores.sqlite.state import SqliteState

NS = "default/session/chat/s-1"
_spawn = multiprocessing.get_context("spawn")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def state(path: Path) -> Iterator[SqliteState]:
    database = open_database(f"sqlite:///{path}")
    face = database.sync_state()
    assert isinstance(face, SqliteState)  # this module tests that backend's own layout
    yield face
    database.close()


def _rows(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _segments(path: Path, key: str) -> list[tuple[int, int, str, int]]:
    """``(start, count, items, bytes)`` of each segment of ``key``, in order; each one's ``sizes`` checked."""
    found = []
    for start, text, sizes, size in _rows(
        path,
        "SELECT start, items, sizes, bytes FROM keepstate_kv_segments WHERE ns = ? AND key = ? ORDER BY start",
        NS,
        key,
    ):
        if text != "!":  # (not corrupted by the test)
            items = [orjson.dumps(item) for item in orjson.loads(f"[{text}]")]
            assert sizes is None or [int(n) for n in sizes.split(",")] == [len(item) for item in items]
        found.append((int(start), len(sizes.split(",")) if sizes else len(items), str(text), int(size)))
    return found


def _corrupt(path: Path, key: str, keep: set[int]) -> None:
    """Overwrite every segment of ``key`` but those starting at ``keep`` with text that is not JSON."""
    conn = sqlite3.connect(path)
    with conn:
        for start, *_ in _segments(path, key):
            if start not in keep:
                conn.execute(
                    "UPDATE keepstate_kv_segments SET items = '!' WHERE ns = ? AND key = ? AND start = ?",
                    (NS, key, start),
                )
    conn.close()


def _assert_consistent(path: Path, key: str) -> None:
    """A list's segments cover its items exactly, from its base on, and its header says what they hold."""
    heads = _rows(path, "SELECT kind, size, length, base FROM keepstate_kv WHERE ns = ? AND key = ?", NS, key)
    kind, size, length, base = heads[0] if heads else ("d", 0, 0, 0)
    segments = _segments(path, key)
    if kind != "l":
        assert segments == []
        return
    position = base
    for start, count, text, size_of in segments:
        assert start == position and count == len(orjson.loads(f"[{text}]")) > 0 and size_of == len(text.encode())
        position += count
    assert position - base == length
    assert size == (2 + sum(s[3] for s in segments) + len(segments) - 1 if segments else 2)


def _holding(segments: list[tuple[int, int, str, int]], low: int, high: int) -> set[int]:
    """The starts of the segments holding any item of ``low`` … ``high - 1``."""
    return {start for start, count, *_ in segments if start < high and start + count > low}


def _item(index: int, width: int = 300) -> bytes:
    return orjson.dumps(f"{index}:" + "x" * width)


def _build(state: SqliteState, key: str, count: int, width: int = 300) -> list[bytes]:
    items = [_item(index, width) for index in range(count)]
    for start in range(0, count, 3):
        state.append(NS, key, items[start : start + 3])
    return items


# ---------------------------------------------------------------- the layout


def test_appends_fill_the_last_segment_then_start_new_ones(state: SqliteState, path: Path) -> None:
    items = _build(state, "log", 200)
    segments = _segments(path, "log")
    assert len(segments) >= 200 * 310 // SEGMENT_BYTES  # split, not one growing row
    assert all(size <= SEGMENT_BYTES for *_, size in segments)
    _assert_consistent(path, "log")
    entry = state.get(NS, "log")
    assert entry is not None and entry.data == b"[" + b",".join(items) + b"]"


def test_an_append_writes_about_two_pages_whatever_the_lists_length(state: SqliteState, path: Path) -> None:
    """The header's page and the last segment's: no overflow pages rewritten (a segment fits its page)."""
    state.db.connection().execute("PRAGMA wal_autocheckpoint=0")  # the WAL only grows: count its frames

    def frames() -> float:
        return (Path(f"{path}-wal").stat().st_size - 32) / (4096 + 24)

    for length in (1, 3000):
        _build(state, f"l{length}", length, width=140)
        before = frames()
        for index in range(100):
            state.append(NS, f"l{length}", [_item(index, 140)])
        assert (frames() - before) / 100 <= 2.5, length


def test_tail_and_items_read_only_the_segments_holding_them(state: SqliteState, path: Path) -> None:
    items = _build(state, "log", 400)
    segments = _segments(path, "log")
    _corrupt(path, "log", keep=_holding(segments, 230, 240) | _holding(segments, 397, 400))
    page = state.items(NS, "log", 230, 10)
    assert page is not None and page.items == items[230:240] and page.length == 400
    tail = state.tail(NS, "log", 3)
    assert tail is not None and tail.items == items[-3:]


def test_trim_deletes_whole_segments_and_rewrites_only_the_one_holding_the_cut(state: SqliteState, path: Path) -> None:
    items = _build(state, "log", 300)
    before = _segments(path, "log")
    cut = 300 - 123
    (holding,) = _holding(before, cut, cut + 1)
    _corrupt(path, "log", keep={holding})  # trim reads nothing but the segment it cuts
    after = _segments(path, "log")
    assert state.trim(NS, "log", 123) == (101, 123)
    trimmed = _segments(path, "log")
    assert trimmed[0][0] == cut and trimmed[1:] == [row for row in after if row[0] > holding]
    assert _rows(path, "SELECT base, length FROM keepstate_kv WHERE key = 'log'") == [(cut, 123)]
    page = state.items(NS, "log", 0, 2)
    assert page is not None and page.items == items[cut : cut + 2]


def test_pop_touches_only_the_last_segment(state: SqliteState, path: Path) -> None:
    items = _build(state, "log", 100)
    last = _segments(path, "log")[-1][0]
    _corrupt(path, "log", keep={last})
    for expected in reversed(items[last:]):
        popped = state.pop(NS, "log")
        assert popped is not None and popped[0] == expected
    left = _segments(path, "log")
    assert left[-1][0] < last and all(text == "!" for _, _, text, _ in left)  # emptied and dropped; the rest untouched


def test_a_list_written_whole_splits_on_its_first_pop_and_reads_whole_before(state: SqliteState, path: Path) -> None:
    state.put(NS, "w", b'[1,{"a":[2]},"three",4]')
    page = state.tail(NS, "w", 2)
    assert page is not None and (page.items, page.version, page.length) == ([b'"three"', b"4"], 1, 4)
    assert _segments(path, "w") == []
    assert state.pop(NS, "w") == (b"4", 2, 3)
    assert [(s, c, i) for s, c, i, _ in _segments(path, "w")] == [(0, 3, '1,{"a":[2]},"three"')]
    _assert_consistent(path, "w")
    assert state.put(NS, "w", b'"plain"') == 3
    assert _segments(path, "w") == []


def test_trim_to_nothing_then_append_goes_on_from_the_base(state: SqliteState, path: Path) -> None:
    _build(state, "log", 50)
    assert state.trim(NS, "log", 0)[1] == 0
    assert _segments(path, "log") == []
    assert state.append(NS, "log", [b"1", b"2"])[1] == 2
    assert [s for s, *_ in _segments(path, "log")] == [50]
    _assert_consistent(path, "log")
    page = state.tail(NS, "log", 5)
    assert page is not None and page.items == [b"1", b"2"]


def test_random_list_calls_match_the_memory_reference_and_keep_the_layout(state: SqliteState, path: Path) -> None:
    reference = MemoryState()
    rng = random.Random(12)
    for step in range(400):
        call = rng.choice(["append", "append", "pop", "trim", "tail", "items", "put"])
        if call == "append":
            args: tuple[Any, ...] = ([_item(step, rng.choice([5, 200, 3000])) for _ in range(rng.randrange(4))],)
        elif call == "trim":
            args = (rng.randrange(60),)
        elif call == "tail":
            args = (rng.randrange(1, 40),)
        elif call == "items":
            args = (rng.randrange(80), rng.randrange(1, 40))
        elif call == "put":
            args = (b"[" + b",".join(_item(step, 20) for _ in range(rng.randrange(5))) + b"]",)
        else:
            args = ()
        assert getattr(state, call)(NS, "l", *args) == getattr(reference, call)(NS, "l", *args), (step, call)
        _assert_consistent(path, "l")
    assert state.get(NS, "l") == reference.get(NS, "l")


# ---------------------------------------------------------------- expiry


def test_sweep_finds_expired_keys_by_the_partial_index(state: SqliteState, path: Path) -> None:
    state.append(NS, "l", [_item(n) for n in range(100)], ttl_ms=1)
    state.put(NS, "lives", b"1", ttl_ms=60_000)
    asyncio.run(asyncio.sleep(0.02))
    plan = _rows(path, f"EXPLAIN QUERY PLAN {kv.SWEEP}", 0, 10)
    assert any("INDEX keepstate_kv_expiring (expires_at<?)" in str(row[-1]) for row in plan), plan
    assert not any(str(row[-1]).startswith("SCAN keepstate_kv") for row in plan), plan
    assert state.sweep() == 1
    assert _segments(path, "l") == []
    assert _rows(path, "SELECT kind, version, expires_at FROM keepstate_kv WHERE key = 'l'") == [("d", 1, None)]
    assert _rows(path, "SELECT kind FROM keepstate_kv WHERE key = 'lives'") == [("v",)]


def test_an_expired_lists_items_go_with_its_next_write(state: SqliteState, path: Path) -> None:
    state.append(NS, "a", [_item(n) for n in range(60)], ttl_ms=1)
    state.append(NS, "c", [_item(n) for n in range(60)], ttl_ms=1)
    asyncio.run(asyncio.sleep(0.02))
    assert state.append(NS, "a", [b"1"]) == (2, 1)
    assert [(s, c, i) for s, c, i, _ in _segments(path, "a")] == [(0, 1, "1")]
    assert state.incr(NS, "c", 1) == (1, 2)
    assert _segments(path, "c") == []


async def test_the_servers_one_statement_read_judges_expiry(path: Path) -> None:
    database = open_database(f"sqlite:///{path}")
    assert isinstance(database, SqliteDatabase)
    state = await database.state()
    try:
        assert await database.read_with_lease("no-such-token", NS, "k") == (None, None)  # (platform tables made)
        await state.put(NS, "k", b"1", ttl_ms=3_600_000)  # lives for the test, however slow the machine
        await state.append(NS, "l", [b"1"], ttl_ms=3_600_000)
        lease, entry = await database.read_with_lease("no-such-token", NS, "k")
        assert lease is None and entry is not None and entry.expires_at is not None
        _, listed = await database.read_with_lease("no-such-token", NS, "l")
        assert listed is not None and listed.data == b"[1]" and listed.expires_at is not None
        await state.put(NS, "gone", b"1", ttl_ms=1)
        await state.append(NS, "gone-list", [b"1"], ttl_ms=1)
        await asyncio.sleep(0.02)  # the clock passes their 1 ms
        assert (await database.read_with_lease("no-such-token", NS, "gone"))[1] is None
        assert (await database.read_with_lease("no-such-token", NS, "gone-list"))[1] is None
    finally:
        await database.aclose()


# ---------------------------------------------------------------- batches


async def test_a_failed_batch_in_a_commit_group_undoes_only_itself(path: Path) -> None:
    database = open_database(f"sqlite:///{path}")
    state = await database.state()
    try:
        await state.put(NS, "scalar", b'"text"')
        failing = [
            BatchOp("append", NS, "new", items=[_item(n) for n in range(40)]),
            BatchOp("append", NS, "scalar", items=[b"1"]),
        ]
        results = await asyncio.gather(
            state.batch(failing), *(state.put(NS, f"k{n}", b"1") for n in range(20)), return_exceptions=True
        )
        assert isinstance(results[0], NotAList) and results[0].details["index"] == 1
        assert results[1:] == [1] * 20
        assert _segments(path, "new") == [] and _rows(path, "SELECT * FROM keepstate_kv WHERE key = 'new'") == []
    finally:
        await database.aclose()


# ---------------------------------------------------------------- a file of the first schema


def _old_file(path: Path) -> None:
    """A file as the first schema's code left it: a list in three segments numbered 0, 1, 2, a value
    and a tombstone (the rows written with that code's own statements)."""
    db = SqliteFile(str(path))
    db.migrate(sqlite_state.COMPONENT, sqlite_state.STEPS[:1])
    items = ['"a",1', '{"b":[2]},"c",3', "4"]
    size = len(",".join(items)) + 2
    with db.transaction() as conn:
        for seg, text in enumerate(items):
            conn.execute(
                "INSERT INTO keepstate_kv_segments (ns, key, seg, items, bytes) VALUES (?, ?, ?, ?, ?)",
                (NS, "h", seg, text, len(text)),
            )
        conn.executemany(
            "INSERT INTO keepstate_kv (ns, key, version, kind, value, size, length) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(NS, "h", 3, "l", None, size, 6), (NS, "v", 2, "v", b'{"x":1}', 7, 0), (NS, "gone", 4, "d", None, 0, 0)],
        )
    db.close()


def test_a_file_of_the_first_schema_opens_and_keeps_working(path: Path) -> None:
    _old_file(path)
    with keepstate.open(f"sqlite:///{path}") as store:
        scope = store.scope("session", agent="chat", id="s-1")
        assert _rows(path, "SELECT version FROM keepstate_schema WHERE component = 'state'") == [
            (len(sqlite_state.STEPS),)
        ]
        assert [(s, c) for s, c, *_ in _segments(path, "h")] == [(0, 2), (2, 3), (5, 1)]
        assert scope.get_versioned("h") == (["a", 1, {"b": [2]}, "c", 3, 4], 3)
        assert scope.items("h", start=1, limit=3).items == [1, {"b": [2]}, "c"]
        assert scope.tail("h", 2) == [3, 4]
        assert scope.append("h", [5]) == (4, 7)
        assert scope.pop("h") == 5
        assert scope.trim("h", 3) == (6, 3)
        assert scope.get("h") == ["c", 3, 4]
        _assert_consistent(path, "h")
        assert scope.get_versioned("v") == ({"x": 1}, 2) and scope.expires_at("v") is None
        assert scope.put("gone", 1) == 5
        assert scope.incr("n", ttl_seconds=60) == 1 and scope.expires_at("n") is not None
        assert sorted(record.key for record in store.state.records()) == ["gone", "h", "n", "v"]
        store.state.restore(StateRecord(NS, "h", 9, b"[1]", None))
        assert _segments(path, "h") == []


# ---------------------------------------------------------------- several real processes


def _push_pop(url: str, writer: int, go: Event, out: Any) -> None:
    """Append items named by this writer, pop some (a pop may take any writer's item)."""
    popped: list[bytes] = []
    with keepstate.open(url) as store:
        go.wait(30)
        for index in range(80):
            store.state.append(NS, "q", [_item(writer * 1000 + index, 150)] * (index % 3 + 1))
            if index % 2:
                taken = store.state.pop(NS, "q")
                if taken is not None:
                    popped.append(taken[0])
    out.put(popped)


def test_appends_and_pops_from_four_processes_lose_and_repeat_nothing(path: Path) -> None:
    url = f"sqlite:///{path}"
    out, go = _spawn.Queue(), _spawn.Event()
    procs = [_spawn.Process(target=_push_pop, args=(url, writer, go, out)) for writer in range(4)]
    for proc in procs:
        proc.start()
    go.set()
    popped = [item for _ in procs for item in out.get(timeout=120)]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    with keepstate.open(url) as store:
        left = store.state.get(NS, "q")
    assert left is not None
    remaining = [orjson.dumps(item) for item in orjson.loads(left.data)]
    appended = sorted(_item(w * 1000 + i, 150) for w in range(4) for i in range(80) for _ in range(i % 3 + 1))
    assert sorted(popped + remaining) == appended
    assert left.version == 4 * 80 + len(popped)
    _assert_consistent(path, "q")
