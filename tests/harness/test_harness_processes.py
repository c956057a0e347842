"""Several real processes racing on one harness store: the guards hold across processes.

Each worker is a spawned process with its own store, released by one barrier so the races are
real; the phases inside a job are separated by the same barrier.
"""

from __future__ import annotations

import multiprocessing
import queue
from collections import Counter
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest
from harness_support import SHARED_BACKENDS, SMALL_CHUNK

from keepstate.harness import Done, HarnessStore, LogAppend, Unanswered, open_harness_store

pytestmark = pytest.mark.parametrize("backend_url", SHARED_BACKENDS, indirect=True)
_spawn = multiprocessing.get_context("spawn")
WORKERS = 4
S = "session"
Job = Callable[[HarnessStore, int, Barrier, Any], Any]


def _child(job: Job, url: str, me: int, arg: Any, open_first: bool, barrier: Barrier, out: Any) -> None:
    try:
        if not open_first:
            barrier.wait(60)
        with open_harness_store(url, chunk_size=SMALL_CHUNK) as store:
            if open_first:
                barrier.wait(60)
            out.put((me, True, job(store, me, barrier, arg)))
    except BaseException as error:
        out.put((me, False, repr(error)))


def run_workers(url: str, job: Job, arg: Any, open_first: bool = True) -> list[Any]:
    """Run ``job`` in ``WORKERS`` processes at once; their results, by worker number."""
    barrier, out = _spawn.Barrier(WORKERS), _spawn.Queue()
    procs = [_spawn.Process(target=_child, args=(job, url, me, arg, open_first, barrier, out)) for me in range(WORKERS)]
    for proc in procs:
        proc.start()
    results: dict[int, Any] = {}
    try:
        for _ in procs:
            me, ok, value = out.get(timeout=120)
            assert ok, f"worker {me} failed: {value}"
            results[me] = value
    except queue.Empty:
        pytest.fail("a worker process did not report")
    finally:
        for proc in procs:
            proc.join(30)
    return [results[me] for me in range(WORKERS)]


def _transitions(store: HarnessStore, me: int, barrier: Barrier, ops: list[str]) -> dict[str, list[str]]:
    wins: dict[str, list[str]] = {"start": [], "requeue": [], "settle": []}
    wins["start"] = [op for op in ops if store.start(S, op)]
    barrier.wait(60)
    wins["requeue"] = [op for op in ops if store.requeue(S, op)]
    barrier.wait(60)
    outcome = Done(result={"by": me}) if me % 2 == 0 else Unanswered(reason=f"by {me}")
    wins["settle"] = [op for op in ops if store.settle(S, op, outcome)]
    return wins


def test_each_transition_is_won_by_exactly_one_process(backend_url: str) -> None:
    ops = [f"op-{n}" for n in range(40)]
    with open_harness_store(backend_url) as store:
        for op in ops:
            store.enqueue(session=S, id=op, input=None)
    results = run_workers(backend_url, _transitions, ops)
    for phase in ("start", "requeue", "settle"):
        won = [op for result in results for op in result[phase]]
        assert sorted(won) == sorted(ops), f"{phase}: {Counter(won).most_common(3)}"
    with open_harness_store(backend_url) as store:
        for me, result in enumerate(results):
            for op in result["settle"]:
                record = store.operation(S, op)
                assert record is not None
                expected = ("done", {"by": me}, None) if me % 2 == 0 else ("unanswered", None, f"by {me}")
                assert (record.status, record.result, record.reason) == expected


def _enqueue(store: HarnessStore, me: int, barrier: Barrier, n: int) -> tuple[list[Any], list[int]]:
    shared, own = [], []
    for i in range(n):
        record, accepted = store.enqueue(session=S, id=f"op-{i}", input={"by": me})
        shared.append((record.id, accepted, record.seq, record.input))
        own.append(store.enqueue(session=S, id=f"own-{me}-{i}", input=None).record.seq)
    return shared, own


def test_a_raced_enqueue_is_accepted_once_and_seq_never_repeats(backend_url: str) -> None:
    n = 30
    with open_harness_store(backend_url):
        pass
    results = run_workers(backend_url, _enqueue, n)
    with open_harness_store(backend_url) as store:
        stored = {op.id: op for op in store.operations()}
    assert len(stored) == n + WORKERS * n
    for i in range(n):
        seen = [(me, row) for me, (shared, _) in enumerate(results) for row in shared if row[0] == f"op-{i}"]
        winners = [me for me, row in seen if row[1]]
        assert len(winners) == 1, f"op-{i} accepted by {winners}"
        record = stored[f"op-{i}"]
        assert record.input == {"by": winners[0]}
        assert {(row[2], str(row[3])) for _, row in seen} == {(record.seq, str(record.input))}
    seqs = [op.seq for op in stored.values()]
    assert len(set(seqs)) == len(seqs)
    assert sorted(seqs) == [op.seq for op in store_ops_in_order(backend_url)]
    for me, (_, own) in enumerate(results):
        assert own == sorted(own) and own == [stored[f"own-{me}-{i}"].seq for i in range(n)]


def store_ops_in_order(url: str) -> list[Any]:
    with open_harness_store(url) as store:
        return store.operations()


def _append(store: HarnessStore, me: int, barrier: Barrier, n: int) -> None:
    for i in range(n):
        store.append(S, "plain", [LogAppend({"w": me, "i": i})])  # no ids: PostgreSQL's one-statement path
        store.append(
            S,
            "log",
            [
                LogAppend({"w": me, "i": i}),
                LogAppend({"w": me, "i": i, "pad": "é😀" * 3}, id=f"shared-{i % 5}"),
            ],
        )


def test_appends_from_several_processes_get_distinct_positions_and_unique_ids(backend_url: str) -> None:
    n = 25
    with open_harness_store(backend_url):
        pass
    run_workers(backend_url, _append, n)
    with open_harness_store(backend_url) as store:
        entries = store.read(S, "log")
        assert store.end(S, "log") == len(entries) == WORKERS * n + 5
    assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
    ids = [entry.id for entry in entries if entry.id is not None]
    assert sorted(ids) == [f"shared-{k}" for k in range(5)]
    for me in range(WORKERS):
        mine = [entry.data["i"] for entry in entries if entry.id is None and entry.data["w"] == me]
        assert mine == list(range(n))
    with open_harness_store(backend_url) as store:
        plain = store.read(S, "plain")
        assert store.end(S, "plain") == len(plain) == WORKERS * n
    assert [entry.seq for entry in plain] == list(range(1, len(plain) + 1))
    for me in range(WORKERS):
        assert [entry.data["i"] for entry in plain if entry.data["w"] == me] == list(range(n))


def _append_or_empty(store: HarnessStore, me: int, barrier: Barrier, arg: tuple[int, str]) -> None:
    n, how = arg
    for i in range(n):
        if me == 0 and how == "clear":
            store.clear(S, "cleared")
        elif me == 0:
            store.delete_session(S)
        else:
            store.append(S, "cleared", [LogAppend({"w": me, "i": i})])


@pytest.mark.parametrize("how", ["clear", "delete_session"])
def test_emptying_a_log_racing_appends_leaves_positions_from_1_without_gaps(backend_url: str, how: str) -> None:
    """A clear (or a session delete) is all or nothing against appends: what survives the last one
    is numbered from 1, whichever side won each race."""
    n = 150
    with open_harness_store(backend_url):
        pass
    run_workers(backend_url, _append_or_empty, (n, how))
    with open_harness_store(backend_url) as store:
        entries = store.read(S, "cleared")
        assert store.end(S, "cleared") == len(entries)
    assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
    for me in range(1, WORKERS):
        mine = [entry.data["i"] for entry in entries if entry.data["w"] == me]
        assert mine == sorted(mine)
        assert mine == list(range(n - len(mine), n))  # a suffix: emptying never leaves an older one behind


def _open_fresh(store: HarnessStore, me: int, barrier: Barrier, arg: None) -> int:
    return store.enqueue(session=S, id=f"op-{me}", input=None).record.seq


def test_processes_opening_a_fresh_database_at_once_all_succeed(backend_url: str) -> None:
    seqs = run_workers(backend_url, _open_fresh, None, open_first=False)
    assert len(set(seqs)) == WORKERS
    assert sorted(op.id for op in store_ops_in_order(backend_url)) == [f"op-{me}" for me in range(WORKERS)]
