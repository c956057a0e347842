"""The Redis state store beyond the shared contract: its key layout, its scripts, real processes.

The conformance suite proves the rules; these tests look at what only this backend can get wrong:
every key under the URL's prefix with the namespace as hash tag, the sorted-set index in step with
the hashes, the guarded conversion of a put list racing appends, and no client-side retries.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
import redis

import keepstate
from keepstate.stores import open_database
from keepstate.stores.base import StateFacet
from keepstate.stores.records import StateRecord
from keepstate.stores.redis.db import split_prefix
from keepstate.stores.redis.state import DROP_BATCH, RedisState, lex_bounds

NS = "default/session/chat/s-1"
_spawn = multiprocessing.get_context("spawn")


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisState]:
    database = open_database(redis_url)
    state = await database.state()
    assert isinstance(state, RedisState)  # this module tests that backend's own layout
    yield state
    await database.aclose()


@pytest.fixture
def raw(redis_url: str) -> Iterator[tuple[redis.Redis, str]]:
    plain, prefix = split_prefix(redis_url)
    client = redis.Redis.from_url(plain)
    yield client, prefix
    client.close()


def test_lex_bounds() -> None:
    assert lex_bounds("", "") == ("-", "+")
    assert lex_bounds("item:", "") == ("[item:", "(item:\x7f")
    assert lex_bounds("item:", "item:004") == ("(item:004", "(item:\x7f")
    assert lex_bounds("item:", "abc") == ("[item:", "(item:\x7f")
    assert lex_bounds("", "m") == ("(m", "+")


async def test_every_key_is_under_the_prefix_with_the_namespace_as_hash_tag(
    backend: StateFacet, raw: tuple[redis.Redis, str]
) -> None:
    client, prefix = raw
    await backend.put(NS, "v", b"1")
    await backend.append(NS, "l", [b"1", b"2"])
    await backend.append("other/ns", "l", [b"1"])
    names = sorted(name.decode() for name in client.scan_iter(match=prefix + "*"))
    assert names == sorted([
        f"{prefix}{{{NS}}}:h:v", f"{prefix}{{{NS}}}:h:l", f"{prefix}{{{NS}}}:l:l", f"{prefix}{{{NS}}}:keys",
        f"{prefix}{{other/ns}}:h:l", f"{prefix}{{other/ns}}:l:l", f"{prefix}{{other/ns}}:keys",
    ])
    assert client.lrange(f"{prefix}{{{NS}}}:l:l", 0, -1) == [b"1", b"2"]
    assert client.type(f"{prefix}{{{NS}}}:keys") == b"zset"


async def test_index_follows_puts_deletes_and_drops(backend: StateFacet, raw: tuple[redis.Redis, str]) -> None:
    client, prefix = raw
    index = f"{prefix}{{{NS}}}:keys"
    for name in ("b", "a", "c"):
        await backend.put(NS, name, b"1")
    await backend.append(NS, "d", [b"1"])
    await backend.delete(NS, "b")
    assert client.zrange(index, 0, -1) == [b"a", b"c", b"d"]
    await backend.put(NS, "b", b"2")
    assert client.zrange(index, 0, -1) == [b"a", b"b", b"c", b"d"]
    await backend.drop(NS)
    assert client.exists(index) == 0
    assert client.exists(f"{prefix}{{{NS}}}:l:d") == 0
    assert client.hget(f"{prefix}{{{NS}}}:h:d", "k") == b"d"  # the tombstone keeps the version


async def test_drop_of_more_keys_than_one_batch(backend: StateFacet) -> None:
    for index in range(DROP_BATCH + 37):
        await backend.put(NS, f"k{index:04d}", b"1")
    await backend.drop(NS)
    assert await backend.keys(NS) == []
    assert await backend.put(NS, "k0000", b"1") == 2


async def test_a_put_list_is_converted_and_replaced_cleanly(backend: StateFacet, raw: tuple[redis.Redis, str]) -> None:
    client, prefix = raw
    await backend.put(NS, "l", b'[1,{"a":[2,3]},"x,y"]')
    assert await backend.append(NS, "l", [b"4"]) == (2, 4)
    assert client.lrange(f"{prefix}{{{NS}}}:l:l", 0, -1) == [b"1", b'{"a":[2,3]}', b'"x,y"', b"4"]
    assert await backend.put(NS, "l", b'"plain"') == 3
    assert client.exists(f"{prefix}{{{NS}}}:l:l") == 0
    entry = await backend.get(NS, "l")
    assert entry is not None and entry.data == b'"plain"'


async def test_append_of_many_items_in_one_call(backend: StateFacet) -> None:
    items = [str(i).encode() for i in range(12000)]  # more than Lua's unpack() takes at once
    assert await backend.append(NS, "many", items) == (1, 12000)
    entry = await backend.get(NS, "many")
    assert entry is not None and orjson.loads(entry.data) == list(range(12000))


async def test_records_and_restore(backend: StateFacet) -> None:
    await backend.append(NS, "h", [b"1", b"2"])
    await backend.put(NS, "gone", b"1")
    await backend.delete(NS, "gone")
    records = sorted([record async for record in backend.records()], key=lambda r: r.key)
    assert records == [StateRecord(NS, "gone", 1, None), StateRecord(NS, "h", 1, b"[1,2]")]
    await backend.restore(StateRecord(NS, "h", 7, b'{"v":1}'))
    entry = await backend.get(NS, "h")
    assert entry is not None and (entry.data, entry.version) == (b'{"v":1}', 7)
    assert await backend.keys(NS) == [("h", 7)]
    await backend.restore(StateRecord(NS, "h", 9, None))
    assert await backend.keys(NS) == []
    assert await backend.put(NS, "h", b"1") == 10


async def test_the_client_never_resends_a_command(backend: RedisState) -> None:
    retry = backend.client.get_retry()
    assert retry is not None and retry.get_retries() == 0


# ---------------------------------------------------------------- several real processes

def _convert_racer(url: str, writer: int, times: int, go: Any) -> None:
    with keepstate.open(url) as store:
        go.wait(30)
        for index in range(times):
            store.state.append(NS, "log", [orjson.dumps([writer, index])])


def test_appends_racing_the_conversion_of_a_put_list_all_land(redis_url: str) -> None:
    with keepstate.open(redis_url) as store:
        store.state.put(NS, "log", b'["seed",["s",1]]')
    go = _spawn.Event()
    procs = [_spawn.Process(target=_convert_racer, args=(redis_url, writer, 40, go)) for writer in range(3)]
    for proc in procs:
        proc.start()
    go.set()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    with keepstate.open(redis_url) as store:
        entry = store.state.get(NS, "log")
    assert entry is not None and entry.version == 121
    found = orjson.loads(entry.data)
    assert found[:2] == ["seed", ["s", 1]] and len(found) == 122
    for writer in range(3):
        assert [index for w, index in found[2:] if w == writer] == list(range(40))


