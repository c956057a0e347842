"""Writes as values: a scope's ops take every write as one ``Op`` through ``write``.

The rule this shape adds: a write of a kind no layer knows is refused at the door, before anything is
sent or written, with the same ``InvalidRequest`` on the embedded store (sync and async) and over HTTP.
The calls themselves are the conformance suites' (``Scope``'s public calls go through ``write``).
"""

from __future__ import annotations

import asyncio

import pytest

import keepstate
from keepstate import ops
from keepstate.client import state_calls
from keepstate.client.state_calls import StateTarget
from keepstate.embedded import AsyncStoreOps, StoreOps
from keepstate.errors import InvalidRequest
from keepstate.ops import Op

UNKNOWN = "op must be one of put, delete, append, trim, pop, incr, patch, got 'frobnicate'"


def test_an_unknown_write_is_refused_by_the_embedded_doors_and_writes_nothing() -> None:
    with keepstate.open("memory://ops-unknown") as store:
        sync = StoreOps(store, "default/run/a/r-1")
        with pytest.raises(InvalidRequest, match=UNKNOWN):
            sync.write(Op("frobnicate", "k", 1))
        with pytest.raises(InvalidRequest, match=UNKNOWN):
            asyncio.run(AsyncStoreOps(store, "default/run/a/r-1").write(Op("frobnicate", "k", 1)))
        assert list(store.scope("run", agent="a", id="r-1").keys()) == []


def test_an_unknown_write_is_refused_before_an_http_call_is_made() -> None:
    with pytest.raises(InvalidRequest, match=UNKNOWN):
        state_calls.write(StateTarget.of_run("run", "token"), Op("frobnicate", "k", 1))


def test_each_write_kind_goes_through_the_one_door() -> None:
    with keepstate.open("memory://ops-kinds") as store:
        door = StoreOps(store, "default/run/a/r-1")
        assert door.write(ops.put("v", {"a": 1}, None, None)) == 1
        assert door.write(ops.patch("v", {"b": 2}, None, None)) == {"a": 1, "b": 2}
        assert door.write(ops.append("l", [1, 2, 3], None)) == (1, 3)
        assert door.write(ops.trim("l", 2, None, None)) == (2, 2)
        assert door.write(ops.pop("l", None)) == 3
        assert door.write(ops.pop("absent", None)) is None
        assert door.write(ops.incr("n", 5, None, None)) == 5
        assert door.write(ops.delete("n", None)) is None
        assert store.scope("run", agent="a", id="r-1").get("n") is None
