"""``Store.ascope``: the embedded store's async face, on every backend.

The same calls on a sync scope and on an async scope of one store give the same answers and the
same errors (a differential run over every scope method), both faces see one another's writes, a
store serves several event loops one after the other (PostgreSQL's pool and Redis's client belong
to one loop: each loop gets its own), and a batch mixing the two faces is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import keepstate
from backends import declaring

pytestmark = pytest.mark.parametrize("backend_url", declaring(), indirect=True)

Call = Callable[[Any], Any]
"""One scope call: given a scope (sync or async), its answer (or awaitable of it)."""

CALLS: list[tuple[str, Call]] = [
    ("get absent", lambda s: s.get_versioned("k")),
    ("put", lambda s: s.put("k", {"a": 1})),
    ("put guarded", lambda s: s.put("k", {"a": 2}, if_version=1)),
    ("put stale", lambda s: s.put("k", {"a": 3}, if_version=1)),
    ("get", lambda s: s.get_versioned("k")),
    ("patch", lambda s: s.patch("k", {"b": [1, 2], "a": None})),
    ("append", lambda s: s.append("log", [1, 2, 3])),
    ("append more", lambda s: s.append("log", ["four"], ttl_seconds=3600)),
    ("tail", lambda s: s.tail("log", 2)),
    ("items", lambda s: s.items("log", 1, 2)),
    ("pop", lambda s: s.pop("log")),
    ("trim", lambda s: s.trim("log", 1)),
    ("append to a value", lambda s: s.append("k", [1])),
    ("incr", lambda s: s.incr("n", 5)),
    ("incr again", lambda s: s.incr("n", -2)),
    ("incr a value", lambda s: s.incr("k")),
    ("update", lambda s: s.update("n", lambda n: n * 10)),
    ("delete", lambda s: s.delete("k")),
    ("delete stale", lambda s: s.delete("log", if_version=99)),
    ("bad key", lambda s: s.put("", 1)),
    ("bad value", lambda s: s.put("k", float("nan"))),
    ("expires_at absent", lambda s: s.expires_at("k")),
]


def _sync_answer(call: Call, scope: keepstate.Scope) -> tuple[str, Any]:
    try:
        return "ok", call(scope)
    except keepstate.KeepstateError as error:
        return type(error).__name__, (error.message, error.details)


async def _async_answer(call: Call, scope: keepstate.AsyncScope) -> tuple[str, Any]:
    try:
        return "ok", await call(scope)
    except keepstate.KeepstateError as error:
        return type(error).__name__, (error.message, error.details)


def test_every_call_answers_as_the_sync_scope_does(store: keepstate.Store) -> None:
    sync_scope = store.scope("session", agent="chat", id="sync")

    async def run() -> list[tuple[str, Any]]:
        async_scope = store.ascope("session", agent="chat", id="async")
        try:
            return [await _async_answer(call, async_scope) for _, call in CALLS]
        finally:
            await store.aclose()

    expected = [_sync_answer(call, sync_scope) for _, call in CALLS]
    assert asyncio.run(run()) == expected
    assert list(sync_scope.keys()) == [("log", 4), ("n", 3)]
    assert [name for (name, _), (kind, _) in zip(CALLS, expected, strict=True) if kind != "ok"] == [
        "put stale",
        "append to a value",
        "incr a value",
        "delete stale",
        "bad key",
        "bad value",
    ]


def test_both_faces_are_one_store(store: keepstate.Store) -> None:
    sync_scope = store.scope("user", agent="chat", id="u-1")
    sync_scope.put("seen", 1)

    async def run() -> Any:
        async_scope = store.ascope("user", agent="chat", id="u-1")
        assert await async_scope.get("seen") == 1
        await async_scope.append("notes", ["from async"])
        assert [key async for key in async_scope.keys()] == [("notes", 1), ("seen", 1)]
        await store.aclose()

    asyncio.run(run())
    assert sync_scope.tail("notes", 5) == ["from async"]


def test_one_store_serves_one_loop_after_another(store: keepstate.Store) -> None:
    async def turn(n: int) -> int:
        scope = store.ascope("agent", agent="chat")
        try:
            return await scope.incr("turns")
        finally:
            if n % 2:  # half the loops close their connections, half leave them to the store
                await store.aclose()

    assert [asyncio.run(turn(n)) for n in range(4)] == [1, 2, 3, 4]
    assert store.scope("agent", agent="chat").get("turns") == 4


def test_a_batch_is_of_one_face(store: keepstate.Store) -> None:
    async def run() -> None:
        async_scope = store.ascope("run", agent="chat", id="r-1")
        try:
            with pytest.raises(keepstate.InvalidRequest) as refused:
                async with async_scope.batch() as batch:
                    batch.put("a", 1)
                    batch.on(store.scope("run", agent="chat", id="r-1")).put("b", 2)
            assert refused.value.details == {"index": 1}
            assert await async_scope.get("a") is None
            across = store.database.capabilities.cross_scope_batches
            async with async_scope.batch() as batch:
                batch.put("a", 1)
                batch.on(store.ascope("run", agent="chat", id="r-2" if across else "r-1")).append("b", [2])
            assert batch.results == [1, keepstate.Appended(1, 1)]
        finally:
            await store.aclose()

    asyncio.run(run())
