"""KeepstateStore from two processes at once, on one SQLite file, on PostgreSQL and on Redis.

- A ``put`` of one key never tears: two processes put and read back the same item, each value
  whole only if all its parts name the same writer and step; every read is whole, and the item's
  ``created_at`` is one value for both (each put keeps it, also when the other wrote in between).
- A read-modify-write conversation through ``KeepstateStore.update`` (each message appended in
  one compare-and-set) loses nothing and doubles nothing, where BaseStore's get-then-put loses
  about half (LangGraph's SqliteStore, and KeepstateStore too: that is BaseStore's contract,
  measured in docs/integrations.md, not asserted here).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import two_writers

from backends import declaring, fresh_url
from keepstate.integrations.langgraph.store import KeepstateStore

NAMESPACE = ("docs", "shared")
PARTS = 200
_spawn = multiprocessing.get_context("spawn")


@pytest.fixture(params=declaring("shared"))
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL that several processes can share."""
    with fresh_url(request.param, tmp_path) as url:
        yield url


def _whole(value: dict[str, Any]) -> bool:
    return value["body"] == [f"{value['writer']}-{value['seq']}"] * PARTS


def _putter(url: str, writer: int, puts: int, ready: Any, out: Any) -> None:
    store = KeepstateStore(url)
    ready.wait()
    torn, created = 0, set()
    for seq in range(puts):
        store.put(NAMESPACE, "item", {"writer": writer, "seq": seq, "body": [f"{writer}-{seq}"] * PARTS})
        item = store.get(NAMESPACE, "item")
        if item is None or not _whole(item.value):
            torn += 1
        else:
            created.add(item.created_at.isoformat())
    store.close()
    out.put((torn, created))


def test_a_put_of_one_key_from_two_processes_never_tears(location: str) -> None:
    ready, out = _spawn.Barrier(2), _spawn.Queue()
    writers = [_spawn.Process(target=_putter, args=(location, n, 200, ready, out)) for n in range(2)]
    for process in writers:
        process.start()
    answers = [out.get(timeout=two_writers.JOIN_TIMEOUT_S) for _ in writers]
    for process in writers:
        process.join(two_writers.JOIN_TIMEOUT_S)
        assert process.exitcode == 0
    assert [torn for torn, _ in answers] == [0, 0]
    assert len(set().union(*(created for _, created in answers))) == 1
    with KeepstateStore(location) as store:
        final = store.get(NAMESPACE, "item")
    assert final is not None and _whole(final.value) and final.value["seq"] == 199


def test_two_processes_appending_through_update_lose_and_double_nothing(location: str) -> None:
    outcome = two_writers.race("keepstate KeepstateStore.update", location, writers=2, per_writer=300)
    assert (outcome.sent, outcome.lost, outcome.duplicated) == (600, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()
