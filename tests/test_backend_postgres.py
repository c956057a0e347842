"""The PostgreSQL state store beyond the shared contract: its layout, its slow paths, real processes.

The conformance suite proves the rules; these tests look at what only this backend can get wrong:
segment rows (appended into, split, cut by trim and pop, removed with the list), what a part of a
list costs against its length (pages touched, rows rewritten), the one-statement fast paths racing
the locked slow paths, a store written with the first schema opening and working, expiry's sweep
through its index, batches never deadlocking, and values kept as bytes rather than jsonb.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import psycopg
import pytest

import keepstate
from keepstate.patch import patcher
from keepstate.stores import open_database
from keepstate.stores.base import StateFacet
from keepstate.stores.postgres import state_sql
from keepstate.stores.postgres.db import amigrate, open_async_pool
from keepstate.stores.postgres.state import COMPONENT, SEGMENT_BYTES, STEPS, PostgresState
from keepstate.stores.records import BatchOp, Entry, StateRecord

NS = "default/session/chat/s-1"
HANG_S = 60
"""Bounds a wait for something that must happen, so a broken store fails instead of hanging."""
_spawn = multiprocessing.get_context("spawn")


@pytest.fixture
async def backend(pg_url: str) -> AsyncIterator[PostgresState]:
    database = open_database(pg_url)
    state = await database.state()
    assert isinstance(state, PostgresState)  # this module tests that backend's own layout
    yield state
    await database.aclose()


def _rows(pg_url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def _segments(pg_url: str, key: str) -> list[tuple[int, int]]:
    return [
        (int(pos), int(count))
        for pos, count in _rows(
            pg_url, "SELECT pos, count FROM state_segments WHERE ns = %s AND key = %s ORDER BY pos", NS, key
        )
    ]


async def test_values_are_bytes_not_jsonb(backend: StateFacet, pg_url: str) -> None:
    types = dict(
        _rows(
            pg_url,
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() "
            "AND table_name IN ('state_keys', 'state_segments') "
            "AND column_name IN ('data', 'items')",
        )
    )
    assert types == {"data": "bytea", "items": "bytea"}
    await backend.put(NS, "k", b'{"b":1,"a":2}')
    assert _rows(pg_url, "SELECT data FROM state_keys WHERE key = 'k'") == [(b'{"b":1,"a":2}',)]


async def test_appends_fill_the_tail_segment_then_start_new_ones(backend: StateFacet, pg_url: str) -> None:
    item = b'"' + b"x" * 98 + b'"'  # 100 bytes
    expected: list[bytes] = []
    for round_ in range(60):
        batch = [item] * (round_ % 3 + 1)
        expected.extend(batch)
        assert await backend.append(NS, "log", batch) == (round_ + 1, len(expected))
    segments = _segments(pg_url, "log")
    assert sum(count for _, count in segments) == len(expected)
    starts = [sum(count for _, count in segments[:index]) for index in range(len(segments))]
    assert [pos for pos, _ in segments] == starts  # each segment at the position of its first item
    assert len(segments) >= len(expected) * 101 // SEGMENT_BYTES  # split, not one growing row
    sizes = _rows(pg_url, "SELECT max(length(items)) FROM state_segments WHERE key = 'log'")
    assert sizes[0][0] <= SEGMENT_BYTES
    entry = await backend.get(NS, "log")
    assert entry is not None and entry.data == b"[" + b",".join(expected) + b"]"


async def test_a_put_list_converts_once_and_replacing_a_list_drops_segments(backend: StateFacet, pg_url: str) -> None:
    await backend.put(NS, "l", b'[1,{"a":[2]},"three"]')
    assert _segments(pg_url, "l") == []
    assert await backend.append(NS, "l", [b"4"]) == (2, 4)
    assert _segments(pg_url, "l") == [(0, 4)]
    assert await backend.put(NS, "l", b'"plain"') == 3
    assert _segments(pg_url, "l") == []
    entry = await backend.get(NS, "l")
    assert entry is not None and entry.data == b'"plain"'
    await backend.append(NS, "m", [b"1", b"2"])
    assert await backend.delete(NS, "m") is True
    assert _segments(pg_url, "m") == []


async def test_an_appended_empty_list_then_items(backend: StateFacet) -> None:
    await backend.put(NS, "e", b"[]")
    assert await backend.append(NS, "e", []) == (2, 0)
    assert await backend.append(NS, "e", [b"1"]) == (3, 1)
    assert await backend.append(NS, "e", [b"2", b"3"]) == (4, 3)
    entry = await backend.get(NS, "e")
    assert entry is not None and entry.data == b"[1,2,3]"


async def test_drop_removes_segments_and_keeps_versions(backend: StateFacet, pg_url: str) -> None:
    for index in range(5):
        await backend.append(NS, f"l{index}", [b"1", b"2"])
        await backend.append(NS, f"l{index}", [b"3"])
    await backend.put("other/ns", "l0", b"[1]")
    await backend.append("other/ns", "l0", [b"2"])
    await backend.drop(NS)
    assert _rows(pg_url, "SELECT count(*) FROM state_segments WHERE ns = %s", NS) == [(0,)]
    assert await backend.keys(NS) == []
    assert await backend.append(NS, "l0", [b"9"]) == (3, 1)
    other = await backend.get("other/ns", "l0")
    assert other is not None and other.data == b"[1,2]"


async def test_conflict_on_a_list_reports_its_version(backend: StateFacet) -> None:
    await backend.append(NS, "l", [b"1"])
    await backend.append(NS, "l", [b"2"])
    with pytest.raises(keepstate.VersionConflict) as caught:
        await backend.put(NS, "l", b"0", if_version=1)
    assert caught.value.current_version == 2
    with pytest.raises(keepstate.VersionConflict):
        await backend.delete(NS, "l", if_version=1)
    assert await backend.put(NS, "l", b"0", if_version=2) == 3


async def test_records_include_lists_and_tombstones_and_restore_replaces_a_list(backend: StateFacet) -> None:
    await backend.append(NS, "h", [b"1", b"2"])
    await backend.put(NS, "gone", b"1")
    await backend.delete(NS, "gone")
    records = [record async for record in backend.records()]
    assert records == [StateRecord(NS, "gone", 1, None), StateRecord(NS, "h", 1, b"[1,2]")]
    await backend.restore(StateRecord(NS, "h", 7, b'{"v":1}'))
    entry = await backend.get(NS, "h")
    assert entry is not None and (entry.data, entry.version) == (b'{"v":1}', 7)
    await backend.restore(StateRecord(NS, "h", 9, None))
    assert await backend.get(NS, "h") is None
    assert await backend.put(NS, "h", b"1") == 10


async def test_records_page_through_many_keys(backend: StateFacet) -> None:
    await asyncio.gather(*(backend.put(f"ns{index % 3}", f"k{index:04d}", b"1") for index in range(1200)))
    records = [record async for record in backend.records()]
    assert len(records) == 1200
    assert [(r.ns, r.key) for r in records] == sorted((r.ns, r.key) for r in records)


async def test_racing_puts_and_appends_on_one_connection_pool(backend: StateFacet) -> None:
    async def writer(index: int) -> int:
        if index % 4 == 0:
            return await backend.put(NS, "k", b"[0]")
        version, _ = await backend.append(NS, "k", [str(index).encode()])
        return version

    versions = await asyncio.gather(*(writer(i) for i in range(40)))
    assert sorted(versions) == list(range(1, 41))
    entry = await backend.get(NS, "k")
    assert entry is not None and entry.version == 40
    assert isinstance(orjson.loads(entry.data), list)


# ---------------------------------------------------------------- several real processes


def test_mixed_writers_in_four_processes_leave_no_orphaned_segments(pg_url: str) -> None:
    """The generic guarantees are in the conformance suite; here, PostgreSQL's own layout stays clean."""
    from store_workers import run_mixed_writers

    assert run_mixed_writers(pg_url)
    assert _rows(
        pg_url,
        "SELECT count(*) FROM state_segments s LEFT JOIN state_keys k USING (ns, key) "
        "WHERE k.kind IS DISTINCT FROM 'l'",
    ) == [(0,)], "no orphaned segment rows"


# ---------------------------------------------------------------- the v2 list layout


def _layout(pg_url: str, key: str, ns: str = NS) -> list[Any]:
    """Check every invariant of a list's rows and return the list its segments hold.

    Header and segments agree on length, size and positions (contiguous from ``base``, the last one at
    ``tail_pos``); every segment with ``lens`` is cut exactly by them and stays under SEGMENT_BYTES
    unless it holds a single item."""
    ((kind, size, length, base, tail_pos),) = _rows(
        pg_url, "SELECT kind, size, length, base, tail_pos FROM state_keys WHERE ns = %s AND key = %s", ns, key
    )
    segments = _rows(
        pg_url, "SELECT pos, count, items, lens FROM state_segments WHERE ns = %s AND key = %s ORDER BY pos", ns, key
    )
    assert kind == "l"
    assert sum(count for _, count, _, _ in segments) == length
    at = base
    for pos, count, items, lens in segments:
        assert pos == at, "segments are contiguous from the header's base"
        at += count
        if lens is not None:
            assert len(lens) == count and sum(lens) + count - 1 == len(items)
            assert count == 1 or len(items) + 4 * count <= SEGMENT_BYTES
    if segments:
        assert tail_pos == segments[-1][0], "the header knows its last segment"
    joined = b"[" + b",".join(bytes(items) for _, _, items, _ in segments) + b"]"
    assert size == len(joined), "the header's size is the list's JSON size"
    return list(orjson.loads(joined))


def _message(n: int, pad: int = 140) -> bytes:
    return orjson.dumps({"n": n, "text": "m" * pad})


async def _built(backend: StateFacet, key: str, count: int, per_append: int = 1) -> list[bytes]:
    made = [_message(n) for n in range(count)]
    for start in range(0, count, per_append):
        await backend.append(NS, key, made[start : start + per_append])
    return made


def _buffers(pg_url: str, query: str, params: dict[str, Any]) -> int:
    """Shared buffers a statement touches (EXPLAIN ANALYZE, rolled back: a write is undone)."""
    with psycopg.connect(pg_url) as conn:
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, params).fetchone()
        conn.rollback()
    assert plan is not None
    top = plan[0][0]
    return int(top["Plan"]["Shared Hit Blocks"]) + int(top["Plan"]["Shared Read Blocks"])


async def test_parts_and_pops_touch_as_many_pages_at_one_mib_as_at_twenty_items(
    backend: StateFacet, pg_url: str
) -> None:
    """Cost independent of the length, measured as pages touched rather than time. Statistics are left
    as a freshly built list finds them (no ANALYZE): the plans must not depend on them."""
    await _built(backend, "short", 20)
    made = await _built(backend, "long", 6000, per_append=1)
    assert len(orjson.dumps([orjson.loads(m) for m in made])) > 900_000
    cases: list[tuple[str, dict[str, Any]]] = [
        (state_sql.TAIL, {"n": 20}),
        (state_sql.ITEMS, {"start": 3000, "limit": 20}),
        (state_sql.POP, {"if_version": None}),
        (state_sql.TRIM, {"keep": 5990, "if_version": None, "ttl": None}),
    ]
    for query, params in cases:
        short = _buffers(pg_url, query, {"ns": NS, "key": "short", **params})
        long = _buffers(pg_url, query, {"ns": NS, "key": "long", **params})
        # a few pages either way are the rows' places (a full page, a free-space lookup); a statement that
        # walked the list's segments would touch 150 or more here (they fit four to a page)
        assert long <= short + 25, (query[:60], short, long)
    page = await backend.items(NS, "long", 3000, 20)
    assert page is not None and page.items == made[3000:3020] and page.length == 6000


async def _round_trips(state: PostgresState, call: Callable[[], Awaitable[object]]) -> int:
    """How many times ``call`` waited for the server: libpq's trace of the one pooled connection."""
    with tempfile.TemporaryFile() as trace:
        async with state.pool.connection() as conn:
            conn.pgconn.trace(trace.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        await call()
        async with state.pool.connection() as conn:
            conn.pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t") for line in trace.read().decode().splitlines() if line.startswith("F\t")]
    return sum(1 for fields in sent if fields[2].split(" ")[0] in ("Sync", "Query"))


async def test_the_common_calls_are_one_round_trip(pg_url: str) -> None:
    database = open_database(pg_url)
    await database.state()  # the schema, migrated
    state = PostgresState(await open_async_pool(pg_url, max_size=1))
    try:
        await _built(state, "h", 100)
        await state.put(NS, "v", b"1")
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("put", lambda: state.put(NS, "v", b"2", if_version=1, ttl_ms=60_000)),
            ("get", lambda: state.get(NS, "v")),
            ("append", lambda: state.append(NS, "h", [b"1"])),
            ("tail", lambda: state.tail(NS, "h", 20)),
            ("items", lambda: state.items(NS, "h", 50, 20)),
            ("pop", lambda: state.pop(NS, "h")),
            ("trim", lambda: state.trim(NS, "h", 80)),
            ("incr", lambda: state.incr(NS, "c", 5)),
            ("incr again", lambda: state.incr(NS, "c", -1, if_version=1)),
            ("keys", lambda: state.keys(NS)),
            ("delete", lambda: state.delete(NS, "v")),
            ("sweep", lambda: state.sweep()),
        ]
        for name, call in calls:
            assert await _round_trips(state, call) == 1, name
        # the locked read-modify-write: BEGIN, the header locked and read, the write, COMMIT
        assert await _round_trips(state, lambda: state.update(NS, "c", patcher({"a": 1}))) == 4
        assert await state.get(NS, "c") == Entry(b'{"a":1}', 3)
    finally:
        await state.pool.close()
        await database.aclose()


async def test_tail_never_reads_the_segments_below_what_it_returns(backend: StateFacet, pg_url: str) -> None:
    made = await _built(backend, "h", 300)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # every segment below the last 40 items now lies
        conn.execute(
            "UPDATE state_segments SET items = convert_to(repeat('0,', count - 1) || '0', 'UTF8'), "
            "lens = array_fill(1, ARRAY[count]) WHERE key = 'h' AND pos + count <= 260"
        )
    page = await backend.tail(NS, "h", 40)
    assert page is not None and page.items == made[-40:] and page.length == 300
    shown = await backend.items(NS, "h", 0, 3)
    assert shown is not None and shown.items == [b"0", b"0", b"0"]  # what reading them would have shown


async def test_trim_deletes_whole_segments_and_rewrites_only_the_one_it_cuts(backend: StateFacet, pg_url: str) -> None:
    made = await _built(backend, "h", 200)
    before = dict(_rows(pg_url, "SELECT pos, xmin::text FROM state_segments WHERE key = 'h'"))
    assert await backend.trim(NS, "h", 150) == (201, 150)
    after = dict(_rows(pg_url, "SELECT pos, xmin::text FROM state_segments WHERE key = 'h'"))
    kept = {pos: xmin for pos, xmin in after.items() if before.get(pos) == xmin}
    assert len(after) - len(kept) <= 1, "at most the segment holding the cut is rewritten"
    assert min(after) == 50 and all(pos >= 50 for pos in kept)
    assert [orjson.dumps(item) for item in _layout(pg_url, "h")] == made[50:]
    assert await backend.append(NS, "h", [b"1"]) == (202, 151)
    assert _layout(pg_url, "h")[-1] == 1


async def test_pop_rewrites_only_the_last_segment(backend: StateFacet, pg_url: str) -> None:
    made = await _built(backend, "h", 100)
    before = _rows(pg_url, "SELECT pos, xmin::text FROM state_segments WHERE key = 'h' ORDER BY pos")
    for expected in reversed(made[-15:]):  # across a segment boundary: the last one emptied and deleted
        popped = await backend.pop(NS, "h")
        assert popped is not None and popped[0] == expected
    after = _rows(pg_url, "SELECT pos, xmin::text FROM state_segments WHERE key = 'h' ORDER BY pos")
    assert after[:-1] == before[: len(after) - 1], "only the (new) last segment was touched"
    assert [orjson.dumps(item) for item in _layout(pg_url, "h")] == made[:85]
    await backend.append(NS, "h", [made[85]])
    assert [orjson.dumps(item) for item in _layout(pg_url, "h")] == made[:86]


async def test_big_appends_and_put_lists_become_bounded_segments(backend: StateFacet, pg_url: str) -> None:
    items = [_message(n) for n in range(500)]
    assert await backend.append(NS, "bulk", items) == (1, 500)
    assert len(_segments(pg_url, "bulk")) >= 500 * len(items[0]) // SEGMENT_BYTES
    assert [orjson.dumps(item) for item in _layout(pg_url, "bulk")] == items
    await backend.put(NS, "whole", b"[" + b",".join(items) + b"]")
    assert _segments(pg_url, "whole") == []  # a put list stays one value until it is cut
    popped = await backend.pop(NS, "whole")
    assert popped is not None and popped[0] == items[-1]
    assert len(_segments(pg_url, "whole")) >= 499 * len(items[0]) // SEGMENT_BYTES
    assert [orjson.dumps(item) for item in _layout(pg_url, "whole")] == items[:-1]
    big = b'"' + b"z" * 5000 + b'"'  # heavier than a segment: a segment of its own
    assert await backend.append(NS, "bulk", [b"1", big, b"2"]) == (2, 503)
    assert _layout(pg_url, "bulk")[-3:] == [1, "z" * 5000, 2]


async def test_an_expired_list_leaves_no_segments_behind(backend: StateFacet, pg_url: str) -> None:
    await backend.append(NS, "old", [_message(n) for n in range(50)], ttl_ms=100)
    await backend.append(NS, "swept", [_message(n) for n in range(50)], ttl_ms=100)
    await asyncio.sleep(0.2)
    assert await backend.append(NS, "old", [b"1"]) == (2, 1)  # the old items are dropped by this write
    assert _layout(pg_url, "old") == [1]
    assert await backend.incr(NS, "swept", 1) == (1, 2)  # the slow path buries the list first
    assert _segments(pg_url, "swept") == []
    await backend.append(NS, "again", [b"1", b"2"], ttl_ms=100)
    await asyncio.sleep(0.2)
    assert await backend.sweep() == 1
    assert _segments(pg_url, "again") == []
    assert _rows(pg_url, "SELECT kind, version, expires_at FROM state_keys WHERE key = 'again'") == [("d", 1, None)]


async def test_the_sweep_finds_expired_keys_through_its_index(backend: StateFacet, pg_url: str) -> None:
    await asyncio.gather(*(backend.put(NS, f"k{n}", b"1") for n in range(2000)))
    await asyncio.gather(*(backend.put(NS, f"t{n}", b"1", ttl_ms=50) for n in range(5)))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE state_keys")
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + state_sql.SWEEP, (1000,)).fetchall())
    assert "state_keys_expiry" in plan and "Seq Scan on state_keys" not in plan
    await asyncio.sleep(0.1)
    assert await backend.sweep() == 5
    assert len(await backend.keys(NS, limit=5000)) == 2000


async def test_racing_appends_pops_and_trims_keep_the_layout_whole(backend: StateFacet, pg_url: str) -> None:
    """The one-statement trim and pop check their snapshot against the header they lock; racing appends
    must make them retry under the lock, never write a header that disagrees with its segments."""
    versions: list[int] = []
    popped: list[Any] = []

    async def writer(who: int) -> None:
        for index in range(40):
            versions.append((await backend.append(NS, "q", [orjson.dumps([who, index, "p" * 300])]))[0])

    async def popper() -> None:
        for _ in range(30):
            found = await backend.pop(NS, "q")
            if found is not None:
                popped.append(orjson.loads(found[0]))
                versions.append(found[1])

    async def trimmer() -> None:
        for _ in range(15):
            version, _ = await backend.trim(NS, "q", 25)
            if version:
                versions.append(version)

    await asyncio.gather(*(writer(who) for who in range(4)), popper(), popper(), trimmer())
    entry = await backend.get(NS, "q")
    assert entry is not None
    assert sorted(versions) == list(range(1, entry.version + 1)), "every write got the next version, once"
    remaining = _layout(pg_url, "q")
    assert remaining == orjson.loads(entry.data)
    for who in range(4):
        mine = [index for w, index, _ in remaining if w == who]
        assert mine == sorted(mine)
    seen = [(w, index) for w, index, _ in remaining + popped]
    assert len(seen) == len(set(seen)), "no item both popped and kept, or popped twice"


async def test_batches_in_opposite_key_orders_and_drops_never_deadlock(backend: StateFacet) -> None:
    """A deadlock would surface as Unavailable: every batch and drop must succeed, and since each batch
    adds 1 to all six counters and a drop empties them all, the counters always stay equal."""
    keys = [f"c{n}" for n in range(6)]

    async def batches(order: list[str]) -> None:
        for _ in range(25):
            await backend.batch([BatchOp("incr", NS, key, by=1) for key in order])

    async def drops() -> None:
        for _ in range(10):
            await backend.drop(NS)
            await asyncio.sleep(0.01)

    await asyncio.gather(batches(keys), batches(keys[::-1]), batches(keys[3:] + keys[:3]), drops())
    values = {key: await backend.get(NS, key) for key in keys}
    assert len({None if entry is None else entry.data for entry in values.values()}) == 1


# ---------------------------------------------------------------- a store written with the first schema


def _v1_segments(items: list[bytes]) -> list[list[bytes]]:
    """Items as the first layout appended them one by one: into the tail while it stayed ≤ 1800 bytes."""
    segments: list[list[bytes]] = []
    for item in items:
        if segments and len(b",".join(segments[-1])) + 1 + len(item) <= 1800:
            segments[-1].append(item)
        else:
            segments.append([item])
    return segments


def _write_v1_list(conn: psycopg.Connection[Any], key: str, version: int, segments: list[list[bytes]]) -> None:
    joined = [b",".join(segment) for segment in segments]
    size = len(b"[" + b",".join(joined) + b"]")
    conn.execute(
        "INSERT INTO state_keys (ns, key, version, kind, size, length, segs, tail) "
        "VALUES (%s, %s, %s, 'l', %s, %s, %s, %s)",
        (NS, key, version, size, sum(map(len, segments)), len(segments), len(joined[-1])),
    )
    for seg, (items, segment) in enumerate(zip(joined, segments, strict=True), start=1):
        conn.execute(
            "INSERT INTO state_segments (ns, key, seg, items, count) VALUES (%s, %s, %s, %s, %s)",
            (NS, key, seg, items, len(segment)),
        )


async def test_a_store_written_with_the_first_schema_opens_and_keeps_working(pg_url: str) -> None:
    pool = await open_async_pool(pg_url)
    await amigrate(pool, COMPONENT, STEPS[:1])
    await pool.close()
    log = [_message(n, pad=60) for n in range(120)]
    whole = [_message(n, pad=60) for n in range(300)]  # the first layout put a put list's items in ONE segment
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _write_v1_list(conn, "log", 120, _v1_segments(log))
        _write_v1_list(conn, "whole", 7, [whole[:299], whole[299:]])
        conn.execute(
            "INSERT INTO state_keys (ns, key, version, kind, data) VALUES (%s, 'v', 3, 'v', %s)", (NS, b'{"a":1}')
        )
        conn.execute("INSERT INTO state_keys (ns, key, version, kind) VALUES (%s, 'gone', 5, 'd')", (NS,))
    database = open_database(pg_url)
    try:
        state = await database.state()
        assert _rows(pg_url, "SELECT version FROM keepstate_schema WHERE component = 'state'") == [(len(STEPS),)]
        for key, items in (("log", log), ("whole", whole)):
            assert [orjson.dumps(item) for item in _layout(pg_url, key)] == items
            tail = await state.tail(NS, key, 7)
            assert tail is not None and tail.items == items[-7:]
            middle = await state.items(NS, key, 100, 5)
            assert middle is not None and middle.items == items[100:105] and middle.length == len(items)
        popped = await state.pop(NS, "log")  # the last segment gets its lengths, then loses its last item
        assert popped is not None and popped[0] == log[-1] and popped[1:] == (121, 119)
        assert await state.append(NS, "log", [b"1", b"2"]) == (122, 121)
        assert await state.trim(NS, "log", 90) == (123, 90)  # the cut falls inside an old segment
        assert _layout(pg_url, "log") == [*[orjson.loads(m) for m in log[31:119]], 1, 2]
        assert await state.trim(NS, "whole", 250, if_version=7) == (8, 250)  # inside the one big old segment
        assert await state.append(NS, "whole", [b"3"]) == (9, 251)
        popped = await state.pop(NS, "whole")
        assert popped is not None and popped[0] == b"3"
        assert [orjson.dumps(item) for item in _layout(pg_url, "whole")] == whole[50:]
        entry = await state.get(NS, "v")
        assert entry is not None and (entry.data, entry.version, entry.expires_at) == (b'{"a":1}', 3, None)
        assert await state.put(NS, "gone", b"1") == 6
        assert await state.incr(NS, "n", 2) == (2, 1)
    finally:
        await database.aclose()


async def test_many_concurrent_first_calls_open_one_pool(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gather of first async calls on a fresh store shares one pool opening (they used to open a
    pool each: hundreds of connections, "too many clients"); a failed opening fails its waiters too:
    it fails only once all 50 calls are waiting on it (not after a guessed while)."""
    from keepstate.stores import postgres as pg_store
    from keepstate.stores.postgres import db as pg_db

    opened: list[str] = []

    async def counted(url: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(url)
        return await open_async_pool(url, *args, **kwargs)

    monkeypatch.setattr(pg_db, "open_async_pool", counted)
    with keepstate.open(pg_url) as store:
        before = len(opened)  # the store's sync face has a pool of its own, on its own loop
        scope = store.ascope("session", agent="chat", id="many-first")
        versions = await asyncio.gather(*(scope.put(f"k{i}", i) for i in range(200)))
        assert versions == [1] * 200 and len(opened) == before + 1
        await store.aclose()

    loop, arrived = asyncio.get_running_loop(), list[str]()
    acquire = pg_store._acquire

    async def arriving(url: str) -> Any:  # a call wanting this loop's pool: it opens it or waits on the opening
        if asyncio.get_running_loop() is loop:
            arrived.append(url)
        return await acquire(url)

    async def refused(url: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(url)
        give_up = loop.time() + HANG_S
        while len(arrived) < 50:  # every get is waiting on this opening
            assert loop.time() < give_up, f"only {len(arrived)} calls came for the pool"
            await asyncio.sleep(0.001)
        raise keepstate.Unavailable("refused for the test")

    monkeypatch.setattr(pg_store, "_acquire", arriving)
    with keepstate.open(pg_url) as store:
        monkeypatch.setattr(pg_db, "open_async_pool", refused)
        before = len(opened)
        scope = store.ascope("session", agent="chat", id="many-first")
        answers = await asyncio.gather(*(scope.get("k1") for _ in range(50)), return_exceptions=True)
        assert all(isinstance(answer, keepstate.Unavailable) for answer in answers), answers[:3]
        assert len(opened) == before + 1
