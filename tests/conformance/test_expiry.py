"""Expiry, on every backend: an expired key is absent everywhere the moment it expires, whatever the
sweep did, and its version never repeats. Keys that must expire live for a fraction of a second, and are
only looked at once that has surely passed; keys that must still be there live an hour (LONG), so no
stall of a loaded machine can expire them first."""

from __future__ import annotations

import asyncio
import time

import pytest

import keepstate
from backends import declaring
from keepstate.clock import now_ms
from keepstate.errors import InvalidRequest, VersionConflict
from keepstate.stores import open_database

pytestmark = pytest.mark.parametrize("backend_url", declaring(), indirect=True)
TTL = 0.25
"""Seconds a short-lived key lives."""
LONG = 3600
"""Seconds a key lives that a test reads as still there."""


@pytest.fixture
def scope(store: keepstate.Store) -> keepstate.Scope:
    return store.scope("user", agent="chat", id="u-1")


def _expire() -> None:
    time.sleep(TTL + 0.15)


def test_a_key_with_a_ttl_says_when_it_expires_and_then_is_absent(scope: keepstate.Scope) -> None:
    before = now_ms()
    assert scope.put("k", "v", ttl_seconds=LONG) == 1
    expires = scope.expires_at("k")
    assert expires is not None and before + LONG * 1000 - 50 <= expires <= now_ms() + LONG * 1000 + 50
    assert scope.get("k") == "v"
    assert scope.put("k", "v", ttl_seconds=TTL) == 2  # now short-lived
    _expire()
    assert scope.get_versioned("k") == (None, 0)
    assert scope.expires_at("k") is None
    assert list(scope.keys()) == []


def test_an_expired_key_is_absent_for_every_call(scope: keepstate.Scope) -> None:
    scope.put("only-if-absent", 1, ttl_seconds=TTL)
    scope.append("list", [1, 2, 3], ttl_seconds=TTL)
    scope.incr("counter", by=10, ttl_seconds=TTL)
    scope.put("doc", {"old": 1}, ttl_seconds=TTL)
    _expire()
    assert scope.put("only-if-absent", 2, if_version=0) == 2  # absent now; the version goes on
    assert scope.tail("list", 5) == [] and scope.pop("list") is None and scope.trim("list", 1) == (0, 0)
    assert scope.append("list", ["new"]) == (2, 1)  # a new list: the old items are gone
    assert scope.get("list") == ["new"]
    assert scope.incr("counter") == 1  # counts from 0 again
    assert scope.patch("doc", {"new": 1}) == {"new": 1}  # patches {} again
    assert scope.get_versioned("doc") == ({"new": 1}, 2)
    with pytest.raises(VersionConflict) as caught:
        scope.put("doc", 0, if_version=1)
    assert caught.value.current_version == 2


def test_put_without_ttl_clears_expiry_and_other_writes_keep_it(scope: keepstate.Scope) -> None:
    scope.put("k", 1, ttl_seconds=LONG)
    expires = scope.expires_at("k")
    assert expires is not None
    scope.put("k", 2)
    assert scope.expires_at("k") is None
    scope.append("l", [1], ttl_seconds=LONG)
    kept = scope.expires_at("l")
    scope.append("l", [2])
    scope.trim("l", 5)
    scope.pop("l")
    assert scope.expires_at("l") == kept
    scope.incr("c", ttl_seconds=LONG)
    kept = scope.expires_at("c")
    scope.incr("c")
    assert scope.expires_at("c") == kept
    scope.patch("p", {"a": 1}, ttl_seconds=LONG)
    kept = scope.expires_at("p")
    scope.patch("p", {"b": 1})
    assert scope.expires_at("p") == kept


def test_a_later_write_with_a_ttl_moves_the_expiry(scope: keepstate.Scope) -> None:
    scope.append("l", [1], ttl_seconds=LONG / 6)  # not TTL: it could pass before the next write on a loaded machine
    first = scope.expires_at("l")
    scope.append("l", [2], ttl_seconds=LONG)  # lives on
    moved = scope.expires_at("l")
    assert first is not None and moved is not None and moved >= first + LONG * 1000 * 5 // 6
    assert scope.get("l") == [1, 2]
    scope.incr("c", ttl_seconds=LONG)
    scope.incr("c", ttl_seconds=TTL)  # now short-lived
    _expire()
    assert scope.get("c") is None


def test_delete_clears_expiry_and_versions_never_repeat(scope: keepstate.Scope) -> None:
    scope.put("k", 1, ttl_seconds=TTL)
    _expire()
    assert scope.put("k", 2, ttl_seconds=TTL) == 2
    scope.delete("k")
    assert scope.put("k", 3) == 3
    assert scope.expires_at("k") is None
    _expire()
    assert scope.get("k") == 3


async def test_the_sweep_frees_expired_keys_and_reads_agree_before_and_after(backend_url: str) -> None:
    database = open_database(backend_url)
    state = await database.state()
    ns = "default/user/chat/sweep"
    try:
        for index in range(30):
            await state.append(ns, f"l{index}", [b'"x"'] * 20, ttl_ms=200)
        await state.put(ns, "lives", b"1", ttl_ms=LONG * 1000)
        await state.put(ns, "forever", b"2")
        await asyncio.sleep(0.35)
        assert await state.keys(ns) == [("forever", 1), ("lives", 1)]  # before any sweep
        swept = 0
        for _ in range(10):
            swept += await state.sweep(limit=7)
        assert swept >= 30
        assert await state.sweep() == 0
        assert await state.keys(ns) == [("forever", 1), ("lives", 1)]
        assert await state.append(ns, "l0", [b'"y"']) == (2, 1)  # the version goes on after the sweep
        records = {record.key: record for record in [r async for r in state.records()] if record.ns == ns}
        assert records["l1"].data is None and records["l1"].version == 1
        assert records["lives"].expires_at is not None
    finally:
        await database.aclose()


def test_ttl_must_be_a_positive_number(scope: keepstate.Scope) -> None:
    for bad in (0, -1, True, "10", float("inf"), float("nan")):
        with pytest.raises(InvalidRequest):
            scope.put("k", 1, ttl_seconds=bad)  # type: ignore[arg-type]
    assert scope.get_versioned("k") == (None, 0)
