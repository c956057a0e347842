"""Atomic batches on every backend: all writes, or none, across keys and scopes of one store (across
scopes where the store declares ``cross_scope_batches``)."""

from __future__ import annotations

import pytest

import keepstate
from backends import declaring
from keepstate.errors import InvalidRequest, InvalidValue, NotAList, NotAnInteger, TooLarge, VersionConflict
from keepstate.scope import Appended
from keepstate.values import MAX_VALUE_BYTES

pytestmark = pytest.mark.parametrize("backend_url", declaring(), indirect=True)


@pytest.fixture
def run(store: keepstate.Store) -> keepstate.Scope:
    return store.scope("run", agent="chat", id="r-1")


@pytest.fixture
def outbox(store: keepstate.Store, run: keepstate.Scope) -> keepstate.Scope:
    """Another scope of the store; the run's own where a batch stays in one scope (a Redis Cluster:
    test_batch_scopes.py checks the refusal there)."""
    return store.scope("agent", agent="chat") if store.database.capabilities.cross_scope_batches else run


def test_every_write_of_a_batch_lands_with_each_ones_answer(run: keepstate.Scope, outbox: keepstate.Scope) -> None:
    run.put("progress", {"step": 1})
    run.append("log", ["a"])
    run.put("gone", 1)
    with run.batch() as b:
        b.put("progress", {"step": 2}, if_version=1)
        b.append("log", ["b", "c"])
        b.delete("gone")
        b.incr("count", by=3)
        b.patch("doc", {"a": 1})
        b.trim("log", 2)
        b.on(outbox).append("outbox", [{"to": "x"}])
    assert b.results == [2, Appended(2, 3), None, 3, {"a": 1}, Appended(3, 2), Appended(1, 1)]
    assert run.get("progress") == {"step": 2} and run.get("log") == ["b", "c"] and run.get("gone") is None
    assert run.get("count") == 3 and run.get("doc") == {"a": 1}
    assert outbox.get("outbox") == [{"to": "x"}]


def test_later_writes_see_the_earlier_ones(run: keepstate.Scope) -> None:
    with run.batch() as b:
        b.put("k", [1])
        b.append("k", [2])
        b.incr("n")
        b.incr("n", if_version=1)
        b.patch("p", {"a": 1})
        b.patch("p", {"b": 2}, if_version=1)
    assert b.results == [1, Appended(2, 2), 1, 2, {"a": 1}, {"a": 1, "b": 2}]
    assert run.get_versioned("k") == ([1, 2], 2)


def test_a_failed_if_version_lists_every_conflict_and_writes_nothing(
    run: keepstate.Scope, outbox: keepstate.Scope
) -> None:
    run.put("a", 1)
    run.put("b", 1)
    with pytest.raises(VersionConflict) as caught, run.batch() as b:
        b.put("a", 2, if_version=1)  # holds
        b.put("b", 2, if_version=5)  # fails
        b.on(outbox).put("c", 2, if_version=0)  # holds
        b.delete("a", if_version=9)  # fails
        b.incr("n", if_version=3)  # fails: absent
    assert caught.value.conflicts == [
        {"index": 1, "scope": "run", "key": "b", "current_version": 1},
        {"index": 3, "scope": "run", "key": "a", "current_version": 2},
        {"index": 4, "scope": "run", "key": "n", "current_version": 0},
    ]
    assert run.get_versioned("a") == (1, 1) and run.get_versioned("b") == (1, 1)
    assert outbox.get_versioned("c") == (None, 0) and run.get_versioned("n") == (None, 0)


@pytest.mark.parametrize(
    ("write", "error"),
    [
        (lambda b: b.append("scalar", [1]), NotAList),
        (lambda b: b.incr("scalar"), NotAnInteger),
        (lambda b: b.trim("scalar", 1), NotAList),
        (lambda b: b.patch("doc", {"x": "y" * MAX_VALUE_BYTES}), TooLarge),
        (lambda b: b.put("k", float("nan")), InvalidValue),
        (lambda b: b.incr("max"), InvalidValue),
    ],
)
def test_any_other_error_names_its_write_and_writes_nothing(
    run: keepstate.Scope, write: object, error: type[keepstate.KeepstateError]
) -> None:
    run.put("scalar", "text")
    run.put("max", 2**63 - 1)
    with pytest.raises(error) as caught, run.batch() as b:
        b.put("first", 1)
        b.append("log", [1])
        write(b)  # type: ignore[operator]
        b.put("last", 1)
    assert caught.value.details["index"] == 2
    assert run.get("first") is None and run.get("log") is None and run.get("last") is None
    assert run.get_versioned("scalar") == ("text", 1)


def test_an_exception_in_the_block_sends_nothing(run: keepstate.Scope) -> None:
    with pytest.raises(RuntimeError), run.batch() as b:
        b.put("k", 1)
        raise RuntimeError("changed my mind")
    assert run.get("k") is None and b.results == []


def test_a_batch_has_at_most_100_writes_and_one_store(run: keepstate.Scope, backend_url: str) -> None:
    with pytest.raises(InvalidRequest), run.batch() as b:
        for index in range(101):
            b.put(f"k{index}", index)
    assert run.get("k0") is None
    with keepstate.open("memory://") as other:
        elsewhere = other.scope("agent", agent="chat")
        with pytest.raises(InvalidRequest), run.batch() as b:
            b.put("k", 1)
            b.on(elsewhere).put("k", 1)
    assert run.get("k") is None


def test_expiry_in_a_batch(run: keepstate.Scope) -> None:
    with run.batch() as b:
        b.put("k", 1, ttl_seconds=60)
        b.append("l", [1], ttl_seconds=60)
    assert run.expires_at("k") is not None and run.expires_at("l") is not None
