"""The state store contract, run on every backend: a backend that passes this is correct.

Driven through the public embedded API (``keepstate.open(url).scope(...)``), which exercises the
sync face, plus the async face directly (``Database.state()``). No test branches on the backend.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keepstate
from backends import declaring
from keepstate.stores import open_database
from keepstate.stores.records import StateRecord
from keepstate.values import MAX_VALUE_BYTES

pytestmark = pytest.mark.parametrize("backend_url", declaring(), indirect=True)


@pytest.fixture
def scope(store: keepstate.Store) -> keepstate.Scope:
    return store.scope("session", agent="chat", id="s-1")


def test_absent_key_reads_as_default_and_version_zero(scope: keepstate.Scope) -> None:
    assert scope.get("nope") is None
    assert scope.get("nope", default=7) == 7
    assert scope.get_versioned("nope") == (None, 0)


def test_versions_start_at_one_and_grow_by_one_per_write(scope: keepstate.Scope) -> None:
    assert scope.put("k", {"a": 1}) == 1
    assert scope.put("k", {"a": 2}) == 2
    assert scope.append("k2", [1]).version == 1
    assert scope.append("k2", [2]).version == 2
    assert scope.get_versioned("k") == ({"a": 2}, 2)


def test_versions_never_repeat_after_delete(scope: keepstate.Scope) -> None:
    scope.put("k", 1)
    scope.put("k", 2)
    scope.delete("k")
    assert scope.get_versioned("k") == (None, 0)
    assert scope.put("k", 3) == 3
    scope.delete("k")
    assert scope.append("k", ["x"]).version == 4


@pytest.mark.parametrize("if_version", [-1, 2**53, 2**63 - 1, 2**63, 2**64 + 5, True, 1.0])
def test_an_if_version_no_key_can_have_is_refused_before_the_store(scope: keepstate.Scope, if_version: Any) -> None:
    for write in (
        lambda: scope.put("k", 1, if_version=if_version),
        lambda: scope.delete("k", if_version=if_version),
        lambda: scope.incr("n", if_version=if_version),
        lambda: scope.trim("l", 1, if_version=if_version),
    ):
        with pytest.raises(keepstate.InvalidRequest, match="if_version must be an integer from 0 to 9007199254740991"):
            write()
    assert scope.get_versioned("k") == (None, 0) and scope.get_versioned("n") == (None, 0)


def test_if_version_zero_means_only_if_absent(scope: keepstate.Scope) -> None:
    assert scope.put("k", "first", if_version=0) == 1
    with pytest.raises(keepstate.VersionConflict) as caught:
        scope.put("k", "second", if_version=0)
    assert caught.value.current_version == 1
    assert scope.get("k") == "first"
    scope.delete("k")
    assert scope.put("k", "again", if_version=0) == 2


def test_if_version_mismatch_reports_current_version(scope: keepstate.Scope) -> None:
    with pytest.raises(keepstate.VersionConflict) as absent:
        scope.put("k", 1, if_version=3)
    assert absent.value.current_version == 0
    scope.put("k", 1)
    scope.put("k", 2)
    with pytest.raises(keepstate.VersionConflict) as stale:
        scope.put("k", 3, if_version=1)
    assert stale.value.current_version == 2
    assert scope.put("k", 3, if_version=2) == 3
    assert scope.get("k") == 3


def test_delete_is_idempotent_and_guarded(scope: keepstate.Scope) -> None:
    scope.delete("never")  # absent: no error
    scope.delete("never", if_version=0)
    scope.put("k", 1)
    with pytest.raises(keepstate.VersionConflict) as caught:
        scope.delete("k", if_version=0)
    assert caught.value.current_version == 1
    with pytest.raises(keepstate.VersionConflict):
        scope.delete("k", if_version=5)
    assert scope.get("k") == 1
    scope.delete("k", if_version=1)
    assert scope.get_versioned("k") == (None, 0)


def test_append_creates_and_extends_in_order(scope: keepstate.Scope) -> None:
    assert scope.append("h", [{"role": "user"}]) == (1, 1)
    assert scope.append("h", [2, "three", None]) == (2, 4)
    assert scope.append("h", []) == (3, 4)
    assert scope.get("h") == [{"role": "user"}, 2, "three", None]


def test_append_to_a_put_list_keeps_its_items(scope: keepstate.Scope) -> None:
    scope.put("l", [1, [2], {"x": "é"}])
    assert scope.append("l", [4]) == (2, 4)
    assert scope.get("l") == [1, [2], {"x": "é"}, 4]
    scope.put("l", ["fresh"])
    assert scope.get("l") == ["fresh"]
    assert scope.append("l", ["more"]) == (4, 2)
    assert scope.get("l") == ["fresh", "more"]


@pytest.mark.parametrize("value", [{"a": 1}, "text", 3, 2.5, True, None])
def test_append_to_a_non_list_is_refused(scope: keepstate.Scope, value: Any) -> None:
    scope.put("v", value)
    with pytest.raises(keepstate.NotAList):
        scope.append("v", [1])
    assert scope.get_versioned("v") == (value, 1)


def test_append_past_one_mib_adds_nothing(scope: keepstate.Scope) -> None:
    item = "x" * 1000  # 1002 bytes encoded
    for _ in range(10):
        scope.append("big", [item] * 100)
    before = scope.get_versioned("big")
    assert len(before.value) == 1000
    room = MAX_VALUE_BYTES - len(keepstate.values.encode(before.value)) - 1  # one comma before the item
    with pytest.raises(keepstate.TooLarge):
        scope.append("big", ["y" * (room - 1)])  # 2 quotes: one byte too many
    assert scope.get_versioned("big") == before
    assert scope.append("big", ["y" * (room - 2)]).length == 1001
    assert len(keepstate.values.encode(scope.get("big"))) == MAX_VALUE_BYTES


def test_put_over_one_mib_is_refused(scope: keepstate.Scope) -> None:
    with pytest.raises(keepstate.TooLarge):
        scope.put("k", "x" * MAX_VALUE_BYTES)
    assert scope.put("k", "x" * (MAX_VALUE_BYTES - 2)) == 1
    assert len(scope.get("k")) == MAX_VALUE_BYTES - 2


def test_keys_are_ordered_paged_and_live_only(scope: keepstate.Scope) -> None:
    names = [f"item:{i:03d}" for i in range(230)]
    for name in names:
        scope.put(name, 0)
    scope.put("other", 0)
    scope.delete("item:005")
    listed = list(scope.keys(prefix="item:"))
    assert [key for key, _ in listed] == [n for n in names if n != "item:005"]
    assert all(version == 1 for _, version in listed)
    assert [key for key, _ in scope.keys()][-1] == "other"
    assert list(scope.keys(prefix="zzz")) == []


def test_scopes_do_not_see_each_other(store: keepstate.Store) -> None:
    one = store.scope("session", agent="chat", id="s-1")
    others = [
        store.scope("session", agent="chat", id="s-2"),
        store.scope("session", agent="mail", id="s-1"),
        store.scope("run", agent="chat", id="s-1"),
        store.scope("agent", agent="chat"),
        store.scope("session", agent="chat", id="s-1", env="prod"),
    ]
    one.put("k", "mine")
    for other in others:
        assert other.get_versioned("k") == (None, 0)
        assert list(other.keys()) == []


@pytest.mark.parametrize(
    "value",
    [
        {"emoji": "😀", "rtl": "مرحبا", "nested": [[[]], {}], "esc": 'quote" back\\ nl\n'},
        [2**63 - 1, -(2**63), 0.1, 1e308, -0.0],
        "",
        [],
    ],
)
def test_values_round_trip_exactly(scope: keepstate.Scope, value: Any) -> None:
    scope.put("k", value)
    assert scope.get("k") == value
    scope.put("l", [])
    scope.append("l", [value, value])
    assert scope.get("l") == [value, value]


def test_bad_keys_and_values_are_refused_with_codes(scope: keepstate.Scope) -> None:
    for key in ["", "a" * 201, "has space", "slash/no", "é"]:
        with pytest.raises(keepstate.InvalidKey):
            scope.put(key, 1)
    with pytest.raises(keepstate.InvalidValue) as caught:
        scope.put("k", {"a": [1, float("nan")]})
    assert caught.value.path == "$.a[1]"
    with pytest.raises(keepstate.InvalidValue) as in_items:
        scope.append("k", [1, {"s": "nul\x00"}])
    assert in_items.value.path == "$[1].s"
    assert scope.get_versioned("k") == (None, 0)
    with pytest.raises(keepstate.InvalidKey):  # as over HTTP: a prefix no key could start with
        list(scope.keys(prefix="slash/no"))


def test_update_is_exact_under_concurrent_threads(scope: keepstate.Scope) -> None:
    def bump() -> None:
        for _ in range(25):
            scope.update("n", lambda n: n + 1, default=0)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert scope.get_versioned("n") == (100, 100)


def test_drop_empties_a_namespace_and_versions_continue(store: keepstate.Store) -> None:
    scope = store.scope("session", agent="chat", id="gone")
    keep = store.scope("session", agent="chat", id="kept")
    scope.put("a", 1)
    scope.append("h", [1, 2])
    keep.put("a", 1)
    store.state.drop(keepstate.scope.scope_namespace("session", "chat", "gone"))
    assert list(scope.keys()) == []
    assert scope.get_versioned("h") == (None, 0)
    assert keep.get("a") == 1
    assert scope.append("h", [3]) == (2, 1)


def test_records_restore_round_trip(store: keepstate.Store, backend_url: str) -> None:
    scope = store.scope("user", agent="chat", id="u-1")
    scope.put("v", {"x": 1})
    scope.put("v", {"x": 2})
    scope.append("h", ["a", "b"])
    scope.put("gone", 1)
    scope.delete("gone")
    records = sorted(store.state.records(), key=lambda r: (r.ns, r.key))
    summary = [(r.key, r.version, r.data is None) for r in records]
    assert summary == [("gone", 1, True), ("h", 1, False), ("v", 2, False)]
    copy = keepstate.open("memory://")
    for record in records:
        copy.state.restore(record)
    copied = copy.scope("user", agent="chat", id="u-1")
    assert copied.get_versioned("v") == ({"x": 2}, 2)
    assert copied.get("h") == ["a", "b"]
    assert copied.put("gone", 5) == 2
    for record in records:  # and back into a store of this backend's kind
        store.state.restore(StateRecord(record.ns, record.key + "2", record.version, record.data))
    assert scope.get_versioned("v2") == ({"x": 2}, 2)
    assert scope.append("h2", ["c"]) == (2, 3)


async def test_async_face_keeps_the_same_rules(backend_url: str) -> None:
    database = open_database(backend_url)
    backend = await database.state()
    try:
        ns = keepstate.scope.scope_namespace("agent", "chat", None)
        results = await asyncio.gather(
            *(backend.put(ns, "race", b"1", if_version=0) for _ in range(20)), return_exceptions=True
        )
        assert sum(1 for r in results if r == 1) == 1
        assert all(isinstance(r, keepstate.VersionConflict) for r in results if r != 1)
        appended = await asyncio.gather(*(backend.append(ns, "log", [str(i).encode()]) for i in range(30)))
        assert sorted(version for version, _ in appended) == list(range(1, 31))
        entry = await backend.get(ns, "log")
        assert entry is not None and sorted(keepstate.values.decode(entry.data)) == list(range(30))
        assert await backend.keys(ns) == [("log", 30), ("race", 1)]
        assert await backend.delete(ns, "race") is True
        assert await backend.get(ns, "race") is None
        await database.ping()
    finally:
        await database.aclose()


_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_json)
def test_any_json_value_round_trips(scope: keepstate.Scope, value: Any) -> None:
    scope.put("h", value)
    assert scope.get("h") == value


def test_a_key_at_the_highest_version_takes_no_more_writes_and_loses_nothing(store: keepstate.Store) -> None:
    """Only an import can put a key near ``MAX_VERSION`` (writes add one each); there, every write kind
    is refused with keepstate's own error — never a driver's overflow — and nothing changes."""
    top = keepstate.values.MAX_VERSION
    scope = store.scope("agent", agent="limits")
    ns = keepstate.scope.scope_namespace("agent", "limits", None)
    store.state.restore(StateRecord(ns, "v", top, b'{"n": 1}'))
    store.state.restore(StateRecord(ns, "l", top, b"[1, 2]"))
    store.state.restore(StateRecord(ns, "n", top, b"5"))
    store.state.restore(StateRecord(ns, "near", top - 1, b"0"))
    writes: list[Any] = [
        lambda: scope.put("v", 2),
        lambda: scope.patch("v", {"m": 2}),
        lambda: scope.update("v", lambda value: value),
        lambda: scope.append("l", [3]),
        lambda: scope.trim("l", 1),
        lambda: scope.pop("l"),
        lambda: scope.incr("n"),
        lambda: _batch_touching(scope, "n"),
    ]
    for write in writes:
        with pytest.raises(keepstate.InvalidRequest, match="highest"):
            write()
    assert scope.get_versioned("v") == ({"n": 1}, top)
    assert scope.get_versioned("l") == ([1, 2], top)
    assert scope.get_versioned("n") == (5, top)
    assert scope.get("other") is None
    assert scope.incr("near") == 1 and scope.get_versioned("near") == (1, top)  # the last write there is
    with pytest.raises(keepstate.InvalidRequest, match="highest"):
        scope.incr("near")
    scope.delete("v")  # a delete keeps the version: allowed, and the key stays spent
    with pytest.raises(keepstate.InvalidRequest, match="highest"):
        scope.put("v", 3)


def _batch_touching(scope: keepstate.Scope, spent: str) -> None:
    with scope.batch() as b:
        b.put("other", 1)
        b.incr(spent)
