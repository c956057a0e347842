"""Several real processes on one store lose nothing: the guarantees hold across processes.

Run on every backend that several processes can share (memory is one process by definition).
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Event

import orjson
import pytest

import keepstate
from backends import declaring
from store_workers import MIXED_NS, run_all, run_mixed_writers

SHARED = declaring("shared")
_spawn = multiprocessing.get_context("spawn")
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


def _incr(url: str, times: int, go: Event) -> None:
    with keepstate.open(url) as store:
        scope = store.scope("agent", agent="counter")
        go.wait(30)
        for _ in range(times):
            scope.incr("hits")


def test_incr_from_four_processes_ends_exact(backend_url: str) -> None:
    run_all(_incr, [(backend_url, 100)] * 4)
    with keepstate.open(backend_url) as store:
        assert store.scope("agent", agent="counter").get_versioned("hits") == (400, 400)


BATCHES = 40


def _outbox(store: keepstate.Store, ledger: keepstate.Scope) -> keepstate.Scope:
    """The outbox's scope: another, where a batch may span scopes; else the ledger's own (a Redis Cluster)."""
    return store.scope("agent", agent="bank") if store.database.capabilities.cross_scope_batches else ledger


def _batch_writer(url: str, writer: int, go: Event) -> None:
    """Each batch moves one unit from ``from`` to ``to`` and records it in the outbox, together."""
    with keepstate.open(url) as store:
        ledger = store.scope("run", agent="bank", id="ledger")
        outbox = _outbox(store, ledger)
        go.wait(30)
        for index in range(BATCHES):
            with ledger.batch() as b:
                b.incr("from", by=-1)
                b.incr("to", by=1)
                b.on(outbox).append("outbox", [[writer, index]])


def _single_writer(url: str, go: Event) -> None:
    """Single writes racing the batches on their keys: each keeps the invariant on its own."""
    with keepstate.open(url) as store:
        ledger = store.scope("run", agent="bank", id="ledger")
        go.wait(30)
        for _ in range(BATCHES):
            ledger.append("noise", [1])
            ledger.incr("other")


def _reader(url: str, go: Event, out: object) -> None:
    """Reads both counters in one batch-free way many times: a half-applied batch would show."""
    seen_torn = 0
    with keepstate.open(url) as store:
        ledger = store.scope("run", agent="bank", id="ledger")
        outbox = _outbox(store, ledger)
        go.wait(30)
        for _ in range(300):
            moved = -int(ledger.get("from", 0))
            # from and to are read one after the other: between the two reads more batches may land, so
            # to >= moved always; a half-applied batch (from moved, to not yet) would make to < moved
            arrived = int(ledger.get("to", 0))
            logged = outbox.items("outbox", 0, 1).length
            if arrived < moved or logged < moved:
                seen_torn += 1
    out.put(seen_torn)  # type: ignore[attr-defined]


def test_a_batch_is_never_seen_half_applied_by_any_reader(backend_url: str) -> None:
    out = _spawn.Queue()
    go = _spawn.Event()
    procs = [_spawn.Process(target=_batch_writer, args=(backend_url, writer, go)) for writer in range(3)]
    procs.append(_spawn.Process(target=_single_writer, args=(backend_url, go)))
    procs += [_spawn.Process(target=_reader, args=(backend_url, go, out)) for _ in range(2)]
    for proc in procs:
        proc.start()
    go.set()
    torn = [out.get(timeout=180) for _ in range(2)]
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    assert torn == [0, 0], "a reader saw a batch half applied"
    with keepstate.open(backend_url) as store:
        ledger = store.scope("run", agent="bank", id="ledger")
        outbox = _outbox(store, ledger)
        assert (ledger.get("from"), ledger.get("to")) == (-3 * BATCHES, 3 * BATCHES)
        entries = outbox.get("outbox")
        assert len(entries) == 3 * BATCHES
        for writer in range(3):
            assert [index for w, index in entries if w == writer] == list(range(BATCHES))
