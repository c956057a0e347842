"""A log emptied while an append creates it: the one interleaving the process races rarely hit.

On PostgreSQL (READ COMMITTED) an append that creates a log's head row, landing between the
deletes of ``clear`` or ``delete_session``, used to leave a head row whose first entry was
deleted: the log went on from 2 and ``end`` disagreed with ``read``. Here the append is made to
land exactly there: right after the first statement on the head rows, another store appends from
a thread and gets ``APPEND_LANDS_S`` to do so before the delete goes on. A correct store either
makes it wait for the delete (it lands after) or leaves the log it created whole.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from keepstate.harness import HarnessStore, LogAppend, open_harness_store
from keepstate.stores.postgres.harness import PostgresTx

APPEND_LANDS_S = 0.5
S, LOG = "s", "log"


@pytest.fixture
def two_stores(pg_url: str) -> Iterator[tuple[HarnessStore, HarnessStore]]:
    with open_harness_store(pg_url) as first, open_harness_store(pg_url) as second:
        yield first, second


def _append_after_heads_touched(monkeypatch: pytest.MonkeyPatch, other: HarnessStore) -> list[threading.Thread]:
    """Once the first statement on the head rows has run (lock, list or delete), append from
    ``other`` in a thread, and give it ``APPEND_LANDS_S`` to land before the store goes on."""
    started: list[threading.Thread] = []

    def after(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(tx: PostgresTx, sql: str, params: Any = ()) -> Any:
            answer = original(tx, sql, params)
            if "harness_logs" in sql and not started:
                thread = threading.Thread(target=other.append, args=(S, LOG, [LogAppend("raced")]))
                thread.start()
                started.append(thread)
                thread.join(APPEND_LANDS_S)
            return answer

        return call

    monkeypatch.setattr(PostgresTx, "run", after(PostgresTx.run))
    monkeypatch.setattr(PostgresTx, "rows", after(PostgresTx.rows))
    return started


def _consistent(store: HarnessStore) -> None:
    entries = store.read(S, LOG)
    assert store.end(S, LOG) == len(entries)
    assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
    assert store.append(S, LOG, [LogAppend("next")]) == len(entries) + 1


@pytest.mark.parametrize("empty_first", [True, False], ids=["new log", "existing log"])
def test_an_append_racing_a_clear_leaves_the_log_numbered_from_1(
    two_stores: tuple[HarnessStore, HarnessStore], monkeypatch: pytest.MonkeyPatch, empty_first: bool
) -> None:
    store, other = two_stores
    if not empty_first:
        store.append(S, LOG, [LogAppend("before")])
    started = _append_after_heads_touched(monkeypatch, other)
    store.clear(S, LOG)
    monkeypatch.undo()
    assert started, "the clear never touched the head rows"
    started[0].join(10)
    _consistent(store)


@pytest.mark.parametrize("empty_first", [True, False], ids=["new log", "existing log"])
def test_an_append_racing_a_session_delete_leaves_the_log_numbered_from_1(
    two_stores: tuple[HarnessStore, HarnessStore], monkeypatch: pytest.MonkeyPatch, empty_first: bool
) -> None:
    store, other = two_stores
    store.create_session(id=S)
    if not empty_first:
        store.append(S, LOG, [LogAppend("before")])
    started = _append_after_heads_touched(monkeypatch, other)
    store.delete_session(S)
    monkeypatch.undo()
    assert started, "the session delete never touched the head rows"
    started[0].join(10)
    _consistent(store)
