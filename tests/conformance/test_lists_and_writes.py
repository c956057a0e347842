"""Lists read in part, trimmed and popped; store-side ``incr`` and merge ``patch``: on every backend.

Driven through the embedded ``Scope`` (the sync face) and, for the atomicity claims, the async face
of the state facet with many calls in flight. No test branches on the backend.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

import keepstate
from backends import declaring
from keepstate.errors import InvalidRequest, InvalidValue, NotAList, NotAnInteger, TooLarge, VersionConflict
from keepstate.scope import Items
from keepstate.stores import open_database
from keepstate.values import MAX_VALUE_BYTES

pytestmark = pytest.mark.parametrize("backend_url", declaring(), indirect=True)


@pytest.fixture
def scope(store: keepstate.Store) -> keepstate.Scope:
    return store.scope("session", agent="chat", id="s-1")


def _build(scope: keepstate.Scope, key: str, count: int, per_append: int = 7) -> list[int]:
    expected = list(range(count))
    for start in range(0, count, per_append):
        scope.append(key, expected[start : start + per_append])
    return expected


# ---------------------------------------------------------------- reading part of a list


def test_tail_reads_the_last_items_oldest_first(scope: keepstate.Scope) -> None:
    expected = _build(scope, "h", 500)
    assert scope.tail("h", 1) == [499]
    assert scope.tail("h", 20) == expected[-20:]
    assert scope.tail("h", 1000) == expected
    assert scope.tail("absent", 5) == []


def test_items_reads_a_window_with_version_and_length(scope: keepstate.Scope) -> None:
    expected = _build(scope, "h", 300)
    version = scope.get_versioned("h").version
    assert scope.items("h") == Items(expected[:100], version, 300)
    assert scope.items("h", start=123, limit=45) == Items(expected[123:168], version, 300)
    assert scope.items("h", start=290, limit=50) == Items(expected[290:], version, 300)
    assert scope.items("h", start=300, limit=5) == Items([], version, 300)
    assert scope.items("absent") == Items([], 0, 0)


def test_lists_written_whole_are_lists_too(scope: keepstate.Scope) -> None:
    scope.put("w", [{"role": "user", "content": "a"}, 2, "three", [4]])
    assert scope.tail("w", 2) == ["three", [4]]
    assert scope.items("w", start=1, limit=2) == Items([2, "three"], 1, 4)
    assert scope.pop("w") == [4]
    assert scope.get_versioned("w") == ([{"role": "user", "content": "a"}, 2, "three"], 2)
    assert scope.trim("w", 1) == (3, 1)
    assert scope.get("w") == ["three"]


def test_list_calls_on_another_value_are_not_a_list(scope: keepstate.Scope) -> None:
    scope.put("v", {"a": 1})
    scope.put("n", 5)
    for key in ("v", "n"):
        for call, args in (("tail", (1,)), ("items", ()), ("trim", (1,)), ("pop", ())):
            with pytest.raises(NotAList):
                getattr(scope, call)(key, *args)
    assert scope.get_versioned("v") == ({"a": 1}, 1)  # nothing written


def test_items_of_unicode_and_nested_values_round_trip(scope: keepstate.Scope) -> None:
    values = ["é😀", {"nested": [1, {"deep": None}]}, 2**63 - 1, -1.5, True, None, "", "a,b]"]
    scope.append("u", values)
    assert scope.tail("u", 8) == values
    assert scope.items("u", start=3, limit=3).items == values[3:6]


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("tail", (0,)),
        ("tail", (1001,)),
        ("tail", (True,)),
        ("items", (-1, 10)),
        ("items", (0, 0)),
        ("items", (0, 1001)),
        ("trim", (-1,)),
        ("incr", (1.5,)),
        ("incr", (2**63,)),
    ],
)
def test_bad_list_arguments_are_invalid_requests(scope: keepstate.Scope, call: str, args: tuple[object, ...]) -> None:
    with pytest.raises(InvalidRequest):
        getattr(scope, call)("k", *args)


# ---------------------------------------------------------------- trimming and popping


def test_trim_keeps_the_newest_and_is_a_write(scope: keepstate.Scope) -> None:
    expected = _build(scope, "h", 200)
    version = scope.get_versioned("h").version
    assert scope.trim("h", 50) == (version + 1, 50)
    assert scope.get("h") == expected[-50:]
    assert scope.items("h", start=0, limit=3).items == expected[150:153]  # indexes count from the oldest present
    assert scope.trim("h", 500) == (version + 2, 50)  # nothing to drop: still a write
    assert scope.trim("h", 0) == (version + 3, 0)
    assert scope.get("h") == []
    assert scope.append("h", ["again"]) == (version + 4, 1)
    assert scope.trim("absent", 3) == (0, 0)
    assert scope.get_versioned("absent") == (None, 0)


def test_trim_and_pop_honour_if_version(scope: keepstate.Scope) -> None:
    scope.append("h", [1, 2, 3])
    with pytest.raises(VersionConflict) as stale:
        scope.trim("h", 1, if_version=7)
    assert stale.value.current_version == 1
    with pytest.raises(VersionConflict):
        scope.pop("h", if_version=0)
    assert scope.pop("h", if_version=1) == 3
    assert scope.trim("h", 1, if_version=2) == (3, 1)
    with pytest.raises(VersionConflict) as absent:
        scope.trim("absent", 1, if_version=2)
    assert absent.value.current_version == 0


def test_pop_takes_the_last_item_until_none_are_left(scope: keepstate.Scope) -> None:
    scope.append("h", [{"a": 1}, "b", None])
    assert scope.pop("h") is None  # a popped null
    assert scope.get_versioned("h") == ([{"a": 1}, "b"], 2)
    assert scope.pop("h") == "b"
    assert scope.pop("h") == {"a": 1}
    assert scope.get_versioned("h") == ([], 4)
    assert scope.pop("h") is None  # empty: nothing written
    assert scope.get_versioned("h") == ([], 4)
    assert scope.pop("absent") is None and scope.get_versioned("absent") == (None, 0)


def test_pop_and_append_across_segment_boundaries_keep_order(scope: keepstate.Scope) -> None:
    item = "x" * 700
    expected = [f"{n}{item}" for n in range(60)]
    for entry in expected:
        scope.append("big", [entry])
    for _ in range(25):
        assert scope.pop("big") == expected.pop()
    scope.append("big", ["tail-1", "tail-2"])
    expected += ["tail-1", "tail-2"]
    assert scope.get("big") == expected
    assert scope.tail("big", 3) == expected[-3:]
    assert scope.items("big", start=30, limit=10).items == expected[30:40]


async def test_concurrent_pops_take_each_item_exactly_once(backend_url: str) -> None:
    database = open_database(backend_url)
    state = await database.state()
    ns = "default/session/chat/pops"
    try:
        await state.append(ns, "q", [orjson.dumps(n) for n in range(60)])
        popped = await asyncio.gather(*(state.pop(ns, "q") for _ in range(70)))
        taken = [orjson.loads(found[0]) for found in popped if found is not None]
        assert sorted(taken) == list(range(60)) and popped.count(None) == 10
        assert sorted(found[1] for found in popped if found is not None) == list(range(2, 62))
    finally:
        await database.aclose()


# ---------------------------------------------------------------- incr


def test_incr_counts_from_zero_and_by_any_step(scope: keepstate.Scope) -> None:
    assert scope.incr("c") == 1
    assert scope.incr("c", by=41) == 42
    assert scope.incr("c", by=-50) == -8
    assert scope.get_versioned("c") == (-8, 3)
    scope.delete("c")
    assert scope.incr("c", by=5) == 5
    assert scope.get_versioned("c") == (5, 4)  # versions go on after the delete


def test_incr_refuses_what_is_not_an_integer_and_writes_nothing(scope: keepstate.Scope) -> None:
    for key, value in (("f", 1.5), ("one", 1.0), ("s", "7"), ("b", True), ("l", [1]), ("o", {"n": 1}), ("z", None)):
        scope.put(key, value)
        with pytest.raises(NotAnInteger):
            scope.incr(key)
        assert scope.get_versioned(key) == (value, 1)


def test_incr_past_signed_64_bit_is_invalid_and_writes_nothing(scope: keepstate.Scope) -> None:
    scope.put("c", 2**63 - 2)
    assert scope.incr("c") == 2**63 - 1
    with pytest.raises(InvalidValue):
        scope.incr("c")
    scope.put("m", -(2**63) + 1)
    with pytest.raises(InvalidValue):
        scope.incr("m", by=-2)
    assert scope.get_versioned("c") == (2**63 - 1, 2)
    assert scope.get_versioned("m") == (-(2**63) + 1, 1)


def test_incr_honours_if_version(scope: keepstate.Scope) -> None:
    assert scope.incr("c", if_version=0) == 1
    with pytest.raises(VersionConflict) as caught:
        scope.incr("c", if_version=0)
    assert caught.value.current_version == 1
    assert scope.incr("c", by=2, if_version=1) == 3


async def test_concurrent_incrs_all_count(backend_url: str) -> None:
    database = open_database(backend_url)
    state = await database.state()
    ns = "default/agent/chat/"
    try:
        results = await asyncio.gather(*(state.incr(ns, "hits", 1) for _ in range(50)))
        assert sorted(value for value, _ in results) == list(range(1, 51))
        assert sorted(version for _, version in results) == list(range(1, 51))
    finally:
        await database.aclose()


# ---------------------------------------------------------------- merge patch


def test_patch_merges_as_rfc_7396_says(scope: keepstate.Scope) -> None:
    scope.put(
        "doc",
        {
            "title": "Goodbye!",
            "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"],
            "content": "This will be unchanged",
        },
    )
    patched = scope.patch(
        "doc",
        {"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": None}, "tags": ["example"]},
    )
    expected = {
        "title": "Hello!",
        "author": {"givenName": "John"},
        "tags": ["example"],
        "content": "This will be unchanged",
        "phoneNumber": "+01-123-456-7890",
    }
    assert patched == expected
    assert scope.get_versioned("doc") == (expected, 2)


def test_patch_of_an_absent_key_starts_from_an_empty_object(scope: keepstate.Scope) -> None:
    assert scope.patch("new", {"a": {"b": 1}, "gone": None}) == {"a": {"b": 1}}
    assert scope.get_versioned("new") == ({"a": {"b": 1}}, 1)


def test_a_non_object_patch_or_target_is_replaced(scope: keepstate.Scope) -> None:
    scope.put("list", [1, 2])
    assert scope.patch("list", {"a": 1}) == {"a": 1}
    assert scope.patch("list", [3]) == [3]
    assert scope.patch("list", None) is None
    assert scope.get_versioned("list") == (None, 4)


def test_patch_honours_if_version_and_refuses_a_result_too_large(scope: keepstate.Scope) -> None:
    scope.put("doc", {"a": 1})
    with pytest.raises(VersionConflict):
        scope.patch("doc", {"b": 2}, if_version=5)
    with pytest.raises(TooLarge):
        scope.patch("doc", {"big": "x" * MAX_VALUE_BYTES})
    with pytest.raises(InvalidValue) as bad:
        scope.patch("doc", {"n": float("nan")})
    assert bad.value.path == "$.n"
    assert scope.get_versioned("doc") == ({"a": 1}, 1)


async def test_concurrent_patches_of_different_members_all_land(backend_url: str) -> None:
    from keepstate.patch import patcher

    database = open_database(backend_url)
    state = await database.state()
    ns = "default/agent/chat/"
    try:
        await asyncio.gather(*(state.update(ns, "doc", patcher({f"m{n}": n})) for n in range(30)))
        entry = await state.get(ns, "doc")
        assert entry is not None and orjson.loads(entry.data) == {f"m{n}": n for n in range(30)}
        assert entry.version == 30
    finally:
        await database.aclose()


# ---------------------------------------------------------------- the list limit holds for every write


def test_a_list_never_passes_one_mib(scope: keepstate.Scope) -> None:
    chunk = "x" * 1000
    while True:
        try:
            scope.append("h", [chunk] * 50)
        except TooLarge:
            break
    size = len(orjson.dumps(scope.get("h")))
    assert MAX_VALUE_BYTES - 50 * 1003 < size <= MAX_VALUE_BYTES
    length = scope.items("h").length
    scope.pop("h")
    assert scope.items("h").length == length - 1
    scope.append("h", [chunk])  # room for one again after a pop
    with pytest.raises(TooLarge):
        scope.append("h", [chunk] * 50)


def test_the_write_door_takes_every_write_and_refuses_an_unknown_one(store: keepstate.Store) -> None:
    """Each face's one door for a write alone (``write``): every kind through it answers as its call by name
    does, on the sync face and on the async one; a kind it has no write for is refused, writing nothing."""
    from keepstate.stores.records import BatchOp

    ns = keepstate.scope.scope_namespace("session", "chat", "door")
    sync = store.state
    assert sync.write(BatchOp("put", ns, "v", b'{"a":1}')) == 1
    assert sync.write(BatchOp("append", ns, "l", items=[b"1", b"2", b"3"])) == (1, 3)
    assert sync.write(BatchOp("pop", ns, "l")) == (b"3", 2, 2)
    assert sync.write(BatchOp("trim", ns, "l", keep_last=1)) == (3, 1)
    assert sync.write(BatchOp("incr", ns, "n", by=5)) == (5, 1)
    assert sync.write(BatchOp("patch", ns, "v", patcher=lambda old: b'{"a":2}')) == (b'{"a":2}', 2)
    assert sync.write(BatchOp("delete", ns, "n")) is True
    with pytest.raises(InvalidRequest, match="a state write is one of"):
        sync.write(BatchOp("nope", ns, "z"))

    async def through_the_async_face() -> tuple[object, ...]:
        facet = await store.async_state()
        with pytest.raises(InvalidRequest, match="a state write is one of"):
            await facet.write(BatchOp("nope", ns, "z"))
        return await facet.write(BatchOp("append", ns, "l", items=[b"4"])), await facet.pop(ns, "l")

    assert asyncio.run(through_the_async_face()) == ((4, 2), (b"4", 5, 1))
    assert store.state.keys(ns) == [("l", 5), ("v", 2)]
