"""The Redis state store beyond the shared contract: its key layout, its scripts, real processes.

The conformance suite proves the rules; these tests look at what only this backend can get wrong:
every key under the URL's prefix with the namespace as hash tag, the sorted-set index in step with
the hashes, the guarded conversion of a put list racing appends, and no client-side retries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import multiprocessing
import random
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import orjson
import pytest
import redis

import keepstate
from keepstate import patch
from keepstate.errors import KeepstateError, TooLarge
from keepstate.stores import numbers, open_database
from keepstate.stores.base import StateFacet
from keepstate.stores.faces import InlineAsync
from keepstate.stores.memory.state import MemoryState
from keepstate.stores.records import BatchOp, Entry, ListPage, StateRecord
from keepstate.stores.redis import state_lua as lua
from keepstate.stores.redis.db import Script, split_prefix
from keepstate.stores.redis.state import DROP_BATCH, RedisState, lex_bounds
from keepstate.values import MAX_VALUE_BYTES

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
    await backend.incr(NS, "c", 1)
    names = sorted(name.decode() for name in client.scan_iter(match=prefix + "*"))
    assert names == sorted(
        [
            f"{prefix}{{{NS}}}:h:v",
            f"{prefix}{{{NS}}}:h:l",
            f"{prefix}{{{NS}}}:l:l",
            f"{prefix}{{{NS}}}:o:l",
            f"{prefix}{{{NS}}}:h:c",
            f"{prefix}{{{NS}}}:keys",
            f"{prefix}{{other/ns}}:h:l",
            f"{prefix}{{other/ns}}:l:l",
            f"{prefix}{{other/ns}}:o:l",
            f"{prefix}{{other/ns}}:keys",
        ]
    )  # no scratch hash left behind by incr, no expiry set without a ttl
    assert client.lrange(f"{prefix}{{{NS}}}:l:l", 0, -1) == [b"1", b"2"]
    assert client.lrange(f"{prefix}{{{NS}}}:o:l", 0, -1) == [b"2", b"4"]  # end offsets: bytes + a comma each
    assert client.type(f"{prefix}{{{NS}}}:keys") == b"zset"
    await backend.put(NS, "t", b"1", ttl_ms=60_000)
    assert client.zrange(f"{prefix}expiry", 0, -1) == [f"{prefix}{{{NS}}}:h:t".encode()]


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


async def test_a_script_the_server_does_not_know_is_sent_whole_once(backend: RedisState) -> None:
    """What a Redis restart or SCRIPT FLUSH leaves: EVALSHA refused, the text loaded, then run."""
    token = uuid.uuid4().hex
    text = f"return {{'{token}', ARGV[1], KEYS[1]}}"  # a script no one has loaded yet
    script = Script(backend.client, text)
    assert await backend.client.script_exists(hashlib.sha1(text.encode()).hexdigest()) == [False]
    assert await script(["k"], ["a"]) == [token.encode(), b"a", b"k"]
    assert await backend.client.script_exists(hashlib.sha1(text.encode()).hexdigest()) == [True]


async def test_the_client_never_resends_a_command(backend: RedisState) -> None:
    assert isinstance(backend.client, redis.asyncio.Redis)
    retry = backend.client.get_retry()
    assert retry is not None and retry.get_retries() == 0


# ---------------------------------------------------------------- several real processes


def _race(target: Any, url: str, times: int, writers: int = 3) -> None:
    """Run ``target(url, writer, times, go)`` in ``writers`` processes started together; all must succeed."""
    go = _spawn.Event()
    procs = [_spawn.Process(target=target, args=(url, writer, times, go)) for writer in range(writers)]
    for proc in procs:
        proc.start()
    go.set()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0


def _convert_racer(url: str, writer: int, times: int, go: Any) -> None:
    with keepstate.open(url) as store:
        go.wait(30)
        for index in range(times):
            store.state.append(NS, "log", [orjson.dumps([writer, index])])


def test_appends_racing_the_conversion_of_a_put_list_all_land(redis_url: str) -> None:
    with keepstate.open(redis_url) as store:
        store.state.put(NS, "log", b'["seed",["s",1]]')
    _race(_convert_racer, redis_url, 40)
    with keepstate.open(redis_url) as store:
        entry = store.state.get(NS, "log")
    assert entry is not None and entry.version == 121
    found = orjson.loads(entry.data)
    assert found[:2] == ["seed", ["s", 1]] and len(found) == 122
    for writer in range(3):
        assert [index for w, index in found[2:] if w == writer] == list(range(40))


# ---------------------------------------------------------------- the layout stays consistent


def _check_layout(client: redis.Redis, prefix: str, ns: str, key: str) -> None:
    """What the scripts promise about one key's names: header, items, offsets, index, expiry set."""
    base = f"{prefix}{{{ns}}}"
    header, items, offsets = f"{base}:h:{key}", f"{base}:l:{key}", f"{base}:o:{key}"
    found: dict[Any, Any] = client.hgetall(header)  # bytes: the client does not decode
    fields = {name.decode(): value for name, value in found.items()}
    kind = fields.get("k")
    indexed = client.zscore(f"{base}:keys", key) is not None
    assert indexed == (kind in (b"v", b"l")), (key, fields)
    expiry = client.zscore(f"{prefix}expiry", header)
    assert (expiry is None) == ("e" not in fields) and (expiry is None or int(expiry) == int(fields["e"]))
    if kind != b"l":
        assert client.exists(items, offsets) == 0, (key, fields)
        assert not {"s", "n", "b"} & set(fields) and (kind == b"v") == ("d" in fields)
        return
    stored: list[Any] = client.lrange(items, 0, -1)
    ends = [int(end) for end in client.lrange(offsets, 0, -1)]
    size, length, base_offset = int(fields["s"]), int(fields["n"]), int(fields["b"])
    assert (len(stored), len(ends)) == (length, length)
    assert size == len(b"[" + b",".join(stored) + b"]")
    assert [end - base_offset for end in ends] == list(itertools.accumulate(len(item) + 1 for item in stored))


async def test_layout_after_appends_trims_and_pops(backend: RedisState, raw: tuple[redis.Redis, str]) -> None:
    client, prefix = raw
    await backend.append(NS, "l", [orjson.dumps("x" * n) for n in range(30)])
    await backend.trim(NS, "l", 12)
    await backend.pop(NS, "l")
    await backend.append(NS, "l", [b"1", b'"two"'])
    await backend.trim(NS, "l", 5)
    _check_layout(client, prefix, NS, "l")
    await backend.trim(NS, "l", 0)
    _check_layout(client, prefix, NS, "l")
    assert await backend.append(NS, "l", [b"7"]) == (7, 1)
    _check_layout(client, prefix, NS, "l")


# ---------------------------------------------------------------- the same answers as the reference

KEYS = [(NS, "a"), (NS, "b"), ("default/agent/chat/", "a")]
BIG = orjson.dumps("y" * 550_000)


def _value(rng: random.Random) -> bytes:
    return orjson.dumps(
        rng.choice(
            [
                [],
                [1, "two"],
                [[3], {"four": 4}, None],
                2**63 - 2,
                -(2**63) + 1,
                7,
                0,
                -3,
                "text",
                {"a": {"b": 1}},
                1.5,
                "é😀",
                [2**63 - 1],
            ]
        )
    )


def _random_op(rng: random.Random, batch: bool, keys: Sequence[tuple[str, str]] = KEYS) -> BatchOp:
    ns, key = rng.choice(keys)
    guard = rng.choice([None] * (12 if batch else 4) + [0, 1, 2, 3])
    ttl = rng.choice([None, None, None, None, 60_000])
    name = rng.choice(["put", "delete", "append", "append", "incr", "patch", "trim"] + ([] if batch else ["pop"]))
    if name == "put":
        return BatchOp("put", ns, key, data=_value(rng), if_version=guard, ttl_ms=ttl)
    if name == "delete":
        return BatchOp("delete", ns, key, if_version=guard)
    if name == "append":
        items = [BIG] if rng.random() < 0.15 else [_value(rng) for _ in range(rng.randrange(4))]
        return BatchOp("append", ns, key, items=items, ttl_ms=ttl)
    if name == "incr":
        return BatchOp(
            "incr", ns, key, by=rng.choice([1, -1, 5, 2**62, -(2**62), 2**63 - 1]), if_version=guard, ttl_ms=ttl
        )
    if name == "patch":
        merge = rng.choice(
            [{"a": 1}, {"a": None}, {"b": {"c": [1]}}, [1, 2], "s", None, {"big": "z" * MAX_VALUE_BYTES}]
        )
        return BatchOp("patch", ns, key, patcher=patch.patcher(merge), if_version=guard, ttl_ms=ttl)
    if name == "trim":
        return BatchOp("trim", ns, key, keep_last=rng.randrange(5), if_version=guard, ttl_ms=ttl)
    return BatchOp("pop", ns, key, if_version=guard)


async def _outcome(call: Any) -> Any:
    """An answer, or the error as what a caller can see of it: class, message and details."""
    try:
        return "ok", await call
    except KeepstateError as error:
        return type(error).__name__, error.message, error.details


async def _call(state: Any, op: BatchOp) -> Any:
    method = {"patch": "update"}.get(op.op, op.op)
    args: dict[str, tuple[Any, ...]] = {
        "put": (op.data, op.if_version, op.ttl_ms),
        "delete": (op.if_version,),
        "append": (op.items, op.ttl_ms),
        "incr": (op.by, op.if_version, op.ttl_ms),
        "update": (op.patcher, op.if_version, op.ttl_ms),
        "trim": (op.keep_last, op.if_version, op.ttl_ms),
        "pop": (op.if_version,),
    }
    return await getattr(state, method)(op.ns, op.key, *args[method])


async def _seen(state: Any) -> list[Any]:
    """Everything a reader can see of the keys, with expiry as 'has one' (the clocks differ)."""
    seen: list[Any] = []
    for ns, key in KEYS:
        entry = await state.get(ns, key)
        seen.append(None if entry is None else (entry.data, entry.version, entry.expires_at is None))
        seen.append(await _outcome(state.tail(ns, key, 2)))
        seen.append(await _outcome(state.items(ns, key, 1, 2)))
    seen += [await state.keys(NS), await state.keys("default/agent/chat/")]
    return seen


@pytest.mark.parametrize("seed", range(12))
async def test_random_writes_and_batches_answer_as_the_memory_reference(
    backend: RedisState, raw: tuple[redis.Redis, str], seed: int
) -> None:
    """Single writes and batches of every op, guards, expiry, lists built and cut in every order:
    each answer and error (message and details too) and everything readable after it is the
    reference's, and the layout stays consistent."""
    rng = random.Random(seed)
    reference = InlineAsync(MemoryState())
    client, prefix = raw
    for step in range(70):
        if rng.random() < 0.3:
            keys = rng.sample(KEYS, rng.choice([1, 1, 2, 3]))  # often one key: ops on it see each other
            ops = [_random_op(rng, batch=True, keys=keys) for _ in range(rng.randrange(1, 6))]
            ours, theirs = await _outcome(backend.batch(ops)), await _outcome(reference.batch(ops))
        else:
            op = _random_op(rng, batch=False)
            ours, theirs = await _outcome(_call(backend, op)), await _outcome(_call(reference, op))
        assert ours == theirs, f"step {step}"
        assert await _seen(backend) == await _seen(reference), f"step {step}"
        for ns, key in KEYS:
            _check_layout(client, prefix, ns, key)


# ---------------------------------------------------------------- single writes: the short scripts and the engine


def _expire_raw(client: redis.Redis, prefix: str, ns: str, key: str) -> None:
    """Make a key with an expiry expired by now, as a store that has waited would hold it."""
    header = f"{prefix}{{{ns}}}:h:{key}"
    client.hset(header, "e", 1)
    client.zadd(f"{prefix}expiry", {header: 1})


async def _start(state: RedisState, raw: tuple[redis.Redis, str], name: str, ns: str, key: str) -> None:
    """Leave ``key`` in the starting state ``name`` (one of STARTS)."""
    client, prefix = raw
    if name == "tombstone":
        await state.put(ns, key, b"1")
        await state.delete(ns, key)
    elif name in ("value", "timed value", "expired value"):
        await state.put(ns, key, b"7", ttl_ms=None if name == "value" else 60_000)
    elif name == "stored list":
        await state.put(ns, key, b'[1,"a"]')
    elif name in ("list", "timed list", "expired list"):
        await state.append(ns, key, [b"1", b'"two"'], ttl_ms=None if name == "list" else 60_000)
    elif name == "emptied list":
        await state.append(ns, key, [b"1"])
        await state.pop(ns, key)
    elif name == "list without offsets":
        base = f"{prefix}{{{ns}}}"
        client.rpush(f"{base}:l:{key}", b"1", b"2")
        client.hset(f"{base}:h:{key}", mapping={"v": 3, "k": "l", "s": 5, "n": 2})
        client.zadd(f"{base}:keys", {key: 0})
    if name.startswith("expired"):
        _expire_raw(client, prefix, ns, key)


def _layout(client: redis.Redis, prefix: str, ns: str, key: str) -> tuple[Any, ...]:
    """Everything Redis holds for one key, the expiry as whether there is one (it counts from now)."""
    base = f"{prefix}{{{ns}}}"
    header = f"{base}:h:{key}"
    fields: dict[Any, Any] = client.hgetall(header)
    timed = fields.pop(b"e", None) is not None
    return (
        fields,
        timed,
        client.zscore(f"{prefix}expiry", header) is not None,
        client.zscore(f"{base}:keys", key) is not None,
        client.lrange(f"{base}:l:{key}", 0, -1),
        client.lrange(f"{base}:o:{key}", 0, -1),
    )


OTHER_NS = "default/session/chat/s-2"
STARTS = [
    "absent",
    "tombstone",
    "value",
    "timed value",
    "expired value",
    "stored list",
    "list",
    "timed list",
    "expired list",
    "emptied list",
    "list without offsets",
]
SINGLES = [
    BatchOp("put", NS, "", data=b'"x"'),
    BatchOp("put", NS, "", data=b"[3]"),
    BatchOp("put", NS, "", data=b"2", if_version=1),
    BatchOp("put", NS, "", data=b"2", if_version=0),
    BatchOp("put", NS, "", data=b"2", ttl_ms=60_000),
    BatchOp("append", NS, "", items=[b"3"]),
    BatchOp("append", NS, "", items=[]),
    BatchOp("append", NS, "", items=[b"3", b'{"four":4}'], ttl_ms=60_000),
    BatchOp("append", NS, "", items=[BIG, BIG]),
    BatchOp("incr", NS, "", by=1),
    BatchOp("incr", NS, "", by=2**63 - 1),
    BatchOp("incr", NS, "", by=5, if_version=1),
    BatchOp("incr", NS, "", by=-1, ttl_ms=60_000),
]


@pytest.mark.parametrize("start", STARTS)
async def test_a_single_write_answers_and_writes_what_the_engine_does(
    backend: RedisState, raw: tuple[redis.Redis, str], start: str
) -> None:
    """Every put, append and incr from every starting layout: the call (its short script, or the
    engine when the script hands the key over) and the engine run on an identical key give the same
    answer or error and leave the same hash, items, offsets, index entry and expiry."""
    client, prefix = raw
    for number, op in enumerate(SINGLES):
        key = f"k{number}"
        mine, engines = dataclasses.replace(op, ns=NS, key=key), dataclasses.replace(op, ns=OTHER_NS, key=key)
        for prepared in (mine, engines):
            await _start(backend, raw, start, prepared.ns, key)
        ours = await _outcome(_call(backend, mine))
        assert ours == await _outcome(backend._one(engines)), (start, op)
        assert _layout(client, prefix, NS, key) == _layout(client, prefix, OTHER_NS, key), (start, op)
        if start != "list without offsets":  # which a refused or pop-like write leaves as it was
            _check_layout(client, prefix, NS, key)


async def test_the_usual_single_writes_never_reach_the_engine(
    backend: RedisState, raw: tuple[redis.Redis, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The point of the short scripts: the writes an agent repeats are one short script each."""
    for start in ("absent", "tombstone", "value", "timed value", "expired value", "stored list"):
        await _start(backend, raw, start, NS, f"put-{start}")
    for start in ("absent", "value", "timed value", "expired value"):
        await _start(backend, raw, start, NS, f"incr-{start}")
    for start in ("absent", "tombstone", "list", "timed list", "emptied list"):
        await _start(backend, raw, start, NS, f"append-{start}")

    async def no_engine(op: BatchOp) -> Any:
        raise AssertionError(f"{op} went to the engine")

    monkeypatch.setattr(backend, "_one", no_engine)
    for start in ("absent", "tombstone", "value", "timed value", "expired value", "stored list"):
        assert await backend.put(NS, f"put-{start}", b"1", ttl_ms=60_000) >= 1
    for start in ("absent", "value", "timed value", "expired value"):
        assert (await backend.incr(NS, f"incr-{start}", 2))[0] in (2, 9)
    for start in ("absent", "tombstone", "list", "timed list", "emptied list"):
        version, length = await backend.append(NS, f"append-{start}", [b"3"])
        assert version >= 1 and length in (1, 3)


# ---------------------------------------------------------------- what only the engine's rounds do


async def test_a_batch_splits_a_stored_list_before_it_appends(
    backend: RedisState, raw: tuple[redis.Redis, str]
) -> None:
    client, prefix = raw
    await backend.put(NS, "l", b'[1,"a,b]",{"c":[2]}]')
    answers = await backend.batch(
        [
            BatchOp("append", NS, "l", items=[b"3"]),
            BatchOp("trim", NS, "l", keep_last=3),
            BatchOp("put", NS, "other", data=b"[9]"),
            BatchOp("append", NS, "other", items=[b"8"]),
        ]
    )
    assert answers == [(2, 4), (3, 3), 1, (2, 2)]
    for key, value in (("l", b'["a,b]",{"c":[2]},3]'), ("other", b"[9,8]")):
        entry = await backend.get(NS, key)
        assert entry is not None and entry.data == value
        _check_layout(client, prefix, NS, key)


@pytest.mark.parametrize("keep", [4, 3, 2, 0])
async def test_a_batch_trims_through_the_items_it_appended(
    backend: RedisState, raw: tuple[redis.Redis, str], keep: int
) -> None:
    """Stored items 1, 2; the batch appends 3, 4, 5 and trims: the cut falls among the stored items,
    at their end, or among the batch's own."""
    client, prefix = raw
    await backend.append(NS, "l", [b"1", b"2"])
    answers = await backend.batch(
        [
            BatchOp("append", NS, "l", items=[b"3", b"4", b"5"]),
            BatchOp("trim", NS, "l", keep_last=keep),
            BatchOp("append", NS, "l", items=[b"6"]),
        ]
    )
    assert answers == [(2, 5), (3, keep), (4, keep + 1)]
    expected = [*[1, 2, 3, 4, 5][5 - keep :], 6]
    entry = await backend.get(NS, "l")
    assert entry is not None and orjson.loads(entry.data) == expected
    _check_layout(client, prefix, NS, "l")


async def test_a_list_a_patch_writes_can_be_appended_to_in_the_same_batch(backend: RedisState) -> None:
    answers = await backend.batch(
        [
            BatchOp("patch", NS, "p", patcher=patch.patcher([1, 2])),
            BatchOp("append", NS, "p", items=[b"3"]),
            BatchOp("trim", NS, "p", keep_last=2),
        ]
    )
    assert answers == [(b"[1,2]", 1), (2, 3), (3, 2)]
    entry = await backend.get(NS, "p")
    assert entry is not None and entry.data == b"[2,3]"


async def test_a_patch_of_a_value_changed_meanwhile_is_computed_again(backend: RedisState, redis_url: str) -> None:
    """The value changes between the engine reporting it and the write: the write is refused as
    stale and the patch runs again on the new value (a compare-and-set, never a lost update)."""
    seen: list[bytes | None] = []
    with keepstate.open(redis_url) as other:

        def meddling(current: bytes | None) -> bytes:
            seen.append(current)
            if len(seen) == 1:
                other.state.put(NS, "doc", b'{"theirs":1}')
            return patch.patcher({"mine": 1})(current)

        assert await backend.update(NS, "doc", meddling) == (b'{"theirs":1,"mine":1}', 2)
    assert seen == [None, b'{"theirs":1}']


async def test_a_batch_error_found_by_a_patch_names_its_op_and_writes_nothing(backend: RedisState) -> None:
    with pytest.raises(TooLarge) as caught:
        await backend.batch(
            [
                BatchOp("put", NS, "k", data=b"1"),
                BatchOp("patch", NS, "doc", patcher=patch.patcher({"x": "y" * MAX_VALUE_BYTES})),
            ]
        )
    assert caught.value.details == {"index": 1}
    assert await backend.get(NS, "k") is None


# ---------------------------------------------------------------- data written by earlier versions


async def test_a_store_written_before_offsets_and_expiry_keeps_working(
    backend: RedisState, raw: tuple[redis.Redis, str]
) -> None:
    """Keys exactly as the previous release wrote them (lists without offsets or ``b``, no expiry
    fields, no expiry set) read and write as the contract says; a list gets offsets on its first
    append or trim, and its size stays exact up to the 1 MiB limit."""
    client, prefix = raw
    base = f"{prefix}{{{NS}}}"
    items = [orjson.dumps("x" * 1000) for _ in range(1000)]
    client.rpush(f"{base}:l:old", *items)
    client.hset(f"{base}:h:old", mapping={"v": 4, "k": "l", "s": len(b"[" + b",".join(items) + b"]"), "n": 1000})
    client.rpush(f"{base}:l:short", b"1", b"2", b"3")
    client.hset(f"{base}:h:short", mapping={"v": 1, "k": "l", "s": 7, "n": 3})
    client.hset(f"{base}:h:put", mapping={"v": 2, "k": "v", "d": b"[1,2]"})
    client.hset(f"{base}:h:gone", mapping={"v": 9, "k": "d"})
    client.zadd(f"{base}:keys", {"old": 0, "short": 0, "put": 0})
    assert await backend.keys(NS) == [("old", 4), ("put", 2), ("short", 1)]
    assert (await backend.tail(NS, "old", 2)) == ListPage(items[-2:], 4, 1000)
    assert await backend.pop(NS, "short") == (b"3", 2, 2)  # a pop needs no offsets
    assert await backend.trim(NS, "old", 600) == (5, 600)
    _check_layout(client, prefix, NS, "old")
    with pytest.raises(TooLarge):
        await backend.append(NS, "old", [orjson.dumps("z" * 500_000)])
    room = MAX_VALUE_BYTES - len((await backend.get(NS, "old") or Entry(b"", 0)).data) - 3  # comma and quotes
    assert await backend.append(NS, "old", [orjson.dumps("z" * room)]) == (6, 601)
    entry = await backend.get(NS, "old")
    assert entry is not None and len(entry.data) == MAX_VALUE_BYTES
    assert await backend.append(NS, "short", [b"4"]) == (3, 3)
    assert await backend.append(NS, "put", [b"3"]) == (3, 3)
    assert await backend.put(NS, "gone", b"1", if_version=0) == 10
    for key in ("old", "short", "put", "gone"):
        _check_layout(client, prefix, NS, key)


# ---------------------------------------------------------------- expiry's bookkeeping


async def test_sweep_frees_lists_and_leaves_moved_expiries(backend: RedisState, raw: tuple[redis.Redis, str]) -> None:
    client, prefix = raw
    base = f"{prefix}{{{NS}}}"
    await backend.append(NS, "l", [b"1", b"2"], ttl_ms=100)
    await backend.put(NS, "moved", b"1", ttl_ms=100)
    await backend.put(NS, "cleared", b"1", ttl_ms=100)
    await asyncio.sleep(0.2)
    [(expiry, found)] = await backend._expired([backend.names.expiry], 10)  # the sweep's first step
    assert expiry == backend.names.expiry and len(found) == 3
    await backend.put(NS, "moved", b"2", ttl_ms=60_000)  # between finding and burying: expiry moved
    await backend.put(NS, "cleared", b"2")  # and cleared
    assert await backend._bury_expired(expiry, found) == 1  # only l is still expired
    assert client.exists(f"{base}:l:l", f"{base}:o:l") == 0
    assert client.hgetall(f"{base}:h:l") == {b"v": b"1", b"k": b"d"}
    assert client.zrange(f"{prefix}expiry", 0, -1) == [f"{base}:h:moved".encode()]
    assert await backend.keys(NS) == [("cleared", 2), ("moved", 2)]
    assert await backend.sweep() == 0
    for key in ("l", "moved", "cleared"):
        _check_layout(client, prefix, NS, key)


async def test_expired_keys_are_skipped_by_a_listing_page_after_page(backend: RedisState) -> None:
    for index in range(25):
        await backend.put(NS, f"k{index:02d}", b"1", ttl_ms=100 if index % 5 else None)
    await asyncio.sleep(0.2)
    assert await backend.keys(NS, limit=3) == [("k00", 1), ("k05", 1), ("k10", 1)]
    assert await backend.keys(NS, after="k10", limit=3) == [("k15", 1), ("k20", 1)]


async def test_drop_tombstones_expiring_keys_and_empties_the_expiry_set(
    backend: RedisState, raw: tuple[redis.Redis, str]
) -> None:
    client, prefix = raw
    await backend.append(NS, "l", [b"1"], ttl_ms=60_000)
    await backend.put(NS, "v", b"1", ttl_ms=60_000)
    await backend.drop(NS)
    assert client.zcard(f"{prefix}expiry") == 0
    for key in ("l", "v"):
        _check_layout(client, prefix, NS, key)
    assert await backend.sweep() == 0


async def test_restore_keeps_the_expiry(backend: RedisState, raw: tuple[redis.Redis, str]) -> None:
    client, prefix = raw
    await backend.restore(StateRecord(NS, "r", 3, b"[1]", expires_at=4_000_000_000_000))
    entry = await backend.get(NS, "r")
    assert entry == Entry(b"[1]", 3, 4_000_000_000_000)
    await backend.restore(StateRecord(NS, "r", 4, None))
    _check_layout(client, prefix, NS, "r")
    assert await backend.get(NS, "r") is None


# ---------------------------------------------------------------- patches from several processes


def _patcher_process(url: str, writer: int, times: int, go: Any) -> None:
    with keepstate.open(url) as store:
        go.wait(30)
        for index in range(times):
            store.state.update(NS, "doc", patch.patcher({f"w{writer}-{index}": index}))


def test_patches_from_three_processes_all_land(redis_url: str) -> None:
    _race(_patcher_process, redis_url, 30)
    with keepstate.open(redis_url) as store:
        entry = store.state.get(NS, "doc")
    assert entry is not None and entry.version == 90
    assert orjson.loads(entry.data) == {f"w{w}-{i}": i for w in range(3) for i in range(30)}


# ---------------------------------------------------------------- incr's arithmetic in Lua

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
EDGES = [
    INT_MIN,
    INT_MIN + 1,
    -(10**18),
    -(10**9) - 1,
    -(10**9),
    -(10**9) + 1,
    -999_999_999,
    -1,
    0,
    1,
    999_999_999,
    10**9,
    10**9 + 1,
    2**53 + 1,
    10**18,
    INT_MAX - 1,
    INT_MAX,
]


def test_lua_addition_is_exact_across_signed_64_bit(raw: tuple[redis.Redis, str]) -> None:
    """``add`` in halves against Python's integers: edges of the halves and of 64 bits, both signs,
    random numbers of every length; overflow exactly where the sum leaves signed 64-bit."""
    client, _ = raw
    adder = client.register_script(lua.ADD + "local s, why = add(ARGV[1], ARGV[2])\nreturn {s or false, why or false}")
    rng = random.Random(7)
    terms = EDGES + [rng.choice([-1, 1]) * rng.randrange(10 ** rng.randrange(1, 20)) for _ in range(120)]
    terms = [n for n in terms if INT_MIN <= n <= INT_MAX]
    pairs = [(a, b) for a in terms for b in rng.sample(terms, 25)] + [(a, b) for a in EDGES for b in EDGES]
    pipe = client.pipeline(transaction=False)
    for a, b in pairs:
        adder(keys=[], args=[str(a), str(b)], client=pipe)
    for (a, b), (total, why) in zip(pairs, pipe.execute(), strict=True):
        if INT_MIN <= a + b <= INT_MAX:
            assert (total, why) == (str(a + b).encode(), None), (a, b)
        else:
            assert (total, why) == (None, b"overflow"), (a, b)


@pytest.mark.parametrize(
    ("text", "integer"),
    [
        ("0", True),
        ("-7", True),
        ("9223372036854775807", True),
        ("-0", True),
        ("01", False),
        ("1.0", False),
        ("1e3", False),
        ('"7"', False),
        ("", False),
        ("-", False),
        ("true", False),
        ("[1]", False),
        ("1" * 21, False),
    ],
)
def test_lua_takes_the_integers_the_reference_takes(raw: tuple[redis.Redis, str], text: str, integer: bool) -> None:
    client, _ = raw
    check = client.register_script(lua.ADD + "if integer(ARGV[1]) then return 1 end return 0")
    assert check(keys=[], args=[text]) == int(integer)
    assert (numbers._INTEGER.fullmatch(text.encode()) is not None and len(text) <= 20) == integer
