"""Several real processes on one store lose nothing: the guarantees hold across processes.

Run on every backend that several processes can share (memory is one process by definition).
"""

from __future__ import annotations

from multiprocessing.synchronize import Event

import orjson
import pytest

import keepstate
from backends import declaring
from store_workers import MIXED_NS, run_all, run_mixed_writers

SHARED = declaring("shared")
pytestmark = pytest.mark.parametrize("backend_url", SHARED, indirect=True)


def _count(url: str, times: int, go: Event) -> None:
    with keepstate.open(url) as store:
        scope = store.scope("agent", agent="counter")
        go.wait(30)
        for _ in range(times):
            scope.update("n", lambda n: n + 1, default=0)


def _append(url: str, writer: int, times: int, go: Event) -> None:
    with keepstate.open(url) as store:
        scope = store.scope("session", agent="chat", id="s")
        go.wait(30)
        for index in range(times):
            scope.append("log", [[writer, index]])


def test_cas_loops_from_four_processes_end_exact(backend_url: str) -> None:
    run_all(_count, [(backend_url, 40)] * 4)
    with keepstate.open(backend_url) as store:
        assert store.scope("agent", agent="counter").get_versioned("n") == (160, 160)


def test_appends_from_three_processes_all_land_in_each_writers_order(backend_url: str) -> None:
    run_all(_append, [(backend_url, writer, 60) for writer in range(3)])
    with keepstate.open(backend_url) as store:
        found = store.scope("session", agent="chat", id="s").get_versioned("log")
    assert found.version == 180
    assert len(found.value) == 180
    for writer in range(3):
        assert [index for w, index in found.value if w == writer] == list(range(60))


def test_versions_never_repeat_under_mixed_writers_in_four_processes(backend_url: str) -> None:
    won = run_mixed_writers(backend_url)
    assert len(won) == len(set(won)), "a version was handed out twice"
    with keepstate.open(backend_url) as store:
        live = dict(store.state.keys(MIXED_NS))
        for key in ("k0", "k1", "k2"):
            mine = sorted(version for name, version in won if name == key)
            assert mine == list(range(1, len(mine) + 1)), "every write of a key got the next version"
            entry = store.state.get(MIXED_NS, key)
            assert (entry is None) == (key not in live), "keys() agrees with get()"
            if entry is not None:
                orjson.loads(entry.data)  # whatever the interleaving, the stored value is whole JSON
