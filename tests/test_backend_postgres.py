"""The PostgreSQL state store beyond the shared contract: its layout, its slow paths, real processes.

The conformance suite proves the rules; these tests look at what only this backend can get wrong:
segment rows (appended into, split, removed with the list), the one-statement fast paths racing the
locked slow paths, and values kept as bytes rather than jsonb.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import AsyncIterator
from typing import Any

import orjson
import psycopg
import pytest

import keepstate
from keepstate.stores import open_database
from keepstate.stores.base import StateFacet
from keepstate.stores.postgres.state import SEGMENT_BYTES, PostgresState
from keepstate.stores.records import StateRecord

NS = "default/session/chat/s-1"
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
    return [(int(pos), int(count)) for pos, count in _rows(
        pg_url, "SELECT pos, count FROM state_segments WHERE ns = %s AND key = %s ORDER BY pos", NS, key)]


async def test_values_are_bytes_not_jsonb(backend: StateFacet, pg_url: str) -> None:
    types = dict(_rows(pg_url, "SELECT column_name, data_type FROM information_schema.columns "
                                "WHERE table_schema = current_schema() "
                                "AND table_name IN ('state_keys', 'state_segments') "
                                "AND column_name IN ('data', 'items')"))
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
    assert _rows(pg_url, "SELECT count(*) FROM state_segments s LEFT JOIN state_keys k USING (ns, key) "
                         "WHERE k.kind IS DISTINCT FROM 'l'") == [(0,)], "no orphaned segment rows"
