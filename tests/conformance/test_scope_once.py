"""Embedded writes with ``idempotency_key=`` (``once.py``), on every store: each write kind, sync and
async, is applied once per key and its repeat returns the first answer; a key used again for another
write is refused; a process that wrote and died before it saw the answer can write again, in a new
process, without doing it twice. Redis keeps each key's record beside the state, expiring a day later."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

import keepstate
from backends import declaring
from keepstate.errors import IdempotencyMismatch

WRITES: dict[str, Callable[[Any, str], Any]] = {
    "put": lambda s, k: s.put("doc", {"a": 1}, idempotency_key=k),
    "patch": lambda s, k: s.patch("doc", {"b": 2}, idempotency_key=k),
    "append": lambda s, k: s.append("list", [4], idempotency_key=k),
    "trim": lambda s, k: s.trim("list", 2, idempotency_key=k),
    "pop": lambda s, k: s.pop("list", idempotency_key=k),
    "incr": lambda s, k: s.incr("n", 2, idempotency_key=k),
    "delete": lambda s, k: s.delete("n", idempotency_key=k),
}
AFTER = {  # the scope after the write, from doc={"a": 0}, list=[1, 2, 3], n=5
    "put": ("doc", {"a": 1}),
    "patch": ("doc", {"a": 0, "b": 2}),
    "append": ("list", [1, 2, 3, 4]),
    "trim": ("list", [2, 3]),
    "pop": ("list", [1, 2]),
    "incr": ("n", 7),
    "delete": ("n", None),
}
ANSWER = {"put": 2, "patch": {"a": 0, "b": 2}, "append": (2, 4), "trim": (2, 2), "pop": 3, "incr": 7, "delete": None}


def seeded(scope: keepstate.Scope) -> keepstate.Scope:
    scope.put("doc", {"a": 0})
    scope.put("list", [1, 2, 3])
    scope.put("n", 5)
    return scope


@pytest.mark.parametrize("backend_url", declaring(), indirect=True)
@pytest.mark.parametrize("write", list(WRITES))
def test_each_write_with_a_key_is_applied_once(store: keepstate.Store, write: str) -> None:
    scope = seeded(store.scope("session", agent="chat", id="s-1"))
    first = WRITES[write](scope, "k-1")
    again = WRITES[write](scope, "k-1")
    assert first == again == ANSWER[write]
    key, value = AFTER[write]
    assert scope.get(key) == value


@pytest.mark.parametrize("backend_url", declaring(), indirect=True)
def test_async_writes_with_a_key_are_applied_once(store: keepstate.Store) -> None:
    async def main() -> tuple[Any, ...]:
        scope = store.ascope("session", agent="chat", id="s-2")
        appended = [await scope.append("log", ["x"], idempotency_key="a-1") for _ in range(2)]
        counted = await asyncio.gather(*(scope.incr("n", idempotency_key="i-1") for _ in range(5)))
        return appended[0], appended[1], counted, await scope.get("log"), await scope.get("n")

    first, again, counted, log, n = asyncio.run(main())
    assert first == again == (1, 1)
    assert counted == [1] * 5 and log == ["x"] and n == 1


@pytest.mark.parametrize("backend_url", declaring(), indirect=True)
def test_a_key_used_again_for_another_write_is_refused(store: keepstate.Store) -> None:
    """A key is the store's own, so another scope's write under it is refused too; except on a Redis
    Cluster, where a write reaches one hash slot and a key is its scope's own (as a batch is there)."""
    scope = store.scope("session", agent="chat", id="s-3")
    scope.append("log", [1], idempotency_key="k-1")
    others: list[Callable[[], Any]] = [
        lambda: scope.append("log", [2], idempotency_key="k-1"),
        lambda: scope.append("other", [1], idempotency_key="k-1"),
        lambda: scope.pop("log", idempotency_key="k-1"),
    ]
    for other in others:
        with pytest.raises(IdempotencyMismatch):
            other()
    assert scope.get("log") == [1] and scope.get("other") is None
    elsewhere = store.scope("session", agent="chat", id="s-4")
    if store.database.capabilities.cross_scope_batches:
        with pytest.raises(IdempotencyMismatch):
            elsewhere.append("log", [1], idempotency_key="k-1")
        assert elsewhere.get("log") is None
    else:
        assert [elsewhere.append("log", [1], idempotency_key="k-1") for _ in range(2)] == [(1, 1)] * 2
        assert elsewhere.get("log") == [1]
    with pytest.raises(keepstate.errors.InvalidKey):
        scope.append("log", [3], idempotency_key="not a key")


@pytest.mark.parametrize("backend_url", declaring("shared"), indirect=True)
def test_a_process_that_died_after_its_write_can_write_it_again_once(backend_url: str) -> None:
    """The first process appends and dies at once (``os._exit``: no answer seen, nothing closed); the
    next one sends the same keyed write, as a restarted worker would, and gets the first answer."""
    program = textwrap.dedent(
        """
        import os, sys, keepstate
        scope = keepstate.open(sys.argv[1]).scope("session", agent="chat", id="s-5")
        answer = scope.append("outbox", ["mail"], idempotency_key="send-1")
        print(tuple(answer), flush=True)
        if sys.argv[2] == "die":
            os._exit(0)
        """
    )
    runs = [
        subprocess.run([sys.executable, "-c", program, backend_url, how], capture_output=True, text=True)
        for how in ("die", "live")
    ]
    assert [run.stdout.strip() for run in runs] == ["(1, 1)", "(1, 1)"], [run.stderr for run in runs]
    with keepstate.open(backend_url) as store:
        assert store.scope("session", agent="chat", id="s-5").get("outbox") == ["mail"]


@pytest.mark.parametrize("backend_url", ["redis", "redis-cluster"], indirect=True)
def test_redis_keeps_a_key_with_its_write_for_a_day(store: keepstate.Store) -> None:
    """The record is written by the write's own script (none for a refused write, whose repeat then runs
    again) and expires a day after it."""
    scope = seeded(store.scope("session", agent="chat", id="s-6"))
    with pytest.raises(keepstate.errors.NotAList):
        scope.append("doc", [1], idempotency_key="k-refused")
    assert [scope.append("list", [4], idempotency_key="k-refused") for _ in range(2)] == [(2, 4)] * 2

    async def records() -> list[tuple[bytes, int]]:
        facet: Any = await store.async_state()
        found = [name async for name in facet.client.scan_iter(match=f"{facet.names.prefix}*once:store:k-*")]
        return [(name, await facet.client.pttl(name)) for name in found]

    [(name, ttl)] = asyncio.run(records())
    assert name.endswith(b"once:store:k-refused") and 23 * 3600 * 1000 < ttl <= 24 * 3600 * 1000


def test_a_sync_write_whose_answer_cannot_be_kept_is_not_applied(sqlite_url: str) -> None:
    """SQLite's sync face (on the caller's thread): a trigger refuses the answers of one key; the put (one
    statement in autocommit otherwise) and the append under it fail whole, writing nothing."""
    import sqlite3

    with keepstate.open(sqlite_url) as store:
        scope = store.scope("session", agent="chat", id="s-7")
        scope.put("seed", 1, idempotency_key="k-seed")  # the store's records exist from the first key on
        with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON ks_remembered WHEN NEW.key = 'k-doomed' "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
        for write in (
            lambda: scope.put("doc", 1, idempotency_key="k-doomed"),
            lambda: scope.append("log", [1], idempotency_key="k-doomed"),
        ):
            with pytest.raises(Exception, match="refused by the test"):
                write()
        assert (scope.get("doc"), scope.get("log")) == (None, None)
        assert scope.put("doc", 2, idempotency_key="k-fine") == 1
