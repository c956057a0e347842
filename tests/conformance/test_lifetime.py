"""The way users hold a store, on every backend: opened in passing and dropped, used after close, from
many threads, under a new event loop per call, in a forked or spawned child, closed twice.

What a store hands out (scopes sync and async, batches, memory; the session and harness stores)
keeps what it needs alive; its resources end at ``close()`` or when the last user is gone, never under
a live object; after ``close()`` every call raises ``StoreClosed``, never a loop's RuntimeError.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import keepstate
from backends import declaring
from keepstate.harness import open_harness_store
from keepstate.sessions import SessionState, open_session_store

ALL = pytest.mark.parametrize("backend_url", declaring(), indirect=True)
SHARED = pytest.mark.parametrize("backend_url", declaring("shared"), indirect=True)
ALONE = pytest.mark.parametrize("backend_url", [n for n in declaring() if n not in declaring("shared")], indirect=True)
DOCUMENTS = pytest.mark.parametrize("backend_url", declaring("documents"), indirect=True)
LEASES = pytest.mark.parametrize("backend_url", declaring("leases"), indirect=True)
HARNESS = pytest.mark.parametrize("backend_url", declaring("harness"), indirect=True)
PLATFORM = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
EXIT_WITHIN_S = 60.0
"""Only bounds a hang of a child program; nothing here is timed."""
DIRTY = ("Traceback", "Exception ignored", "Task was destroyed", "never awaited")


@ALL
def test_a_scope_of_a_store_opened_in_passing_keeps_working(backend_url: str) -> None:
    scope = keepstate.open(backend_url).scope("session", agent="a", id="inline")
    gc.collect()
    assert scope.append("h", [1]).length == 1
    gc.collect()
    scope.put("v", {"n": 1})
    assert scope.incr("c") == 1
    with scope.batch() as batch:
        batch.append("h", [2])
        batch.incr("c")
    assert batch.results[1] == 2
    gc.collect()
    assert scope.get("h") == [1, 2] and scope.get("v") == {"n": 1}


@ALL
def test_an_async_scope_of_a_store_opened_in_passing_works_under_a_new_loop_per_call(backend_url: str) -> None:
    scope = keepstate.open(backend_url).ascope("session", agent="a", id="loops")
    for n in range(4):
        gc.collect()
        assert asyncio.run(scope.append("h", [n])).length == n + 1
    gc.collect()
    assert asyncio.run(scope.get("h")) == [0, 1, 2, 3]


@ALL
async def test_an_async_batch_of_a_store_opened_in_passing_is_one_write(backend_url: str) -> None:
    scope = keepstate.open(backend_url).ascope("session", agent="a", id="abatch")
    gc.collect()
    async with scope.batch() as batch:
        batch.put("a", 1)
        batch.append("l", ["x"])
    assert batch.results[0] == 1
    assert await scope.get("l") == ["x"]


@DOCUMENTS
def test_memory_of_a_store_opened_in_passing_keeps_working(backend_url: str) -> None:
    memory = keepstate.open(backend_url).memory("a")
    gc.collect()
    memory.write("notes/trip", "the trip was called off")
    gc.collect()
    found = memory.read("notes/trip")
    assert found is not None and found.text == "the trip was called off"


@ALL
def test_everything_a_closed_store_handed_out_raises_store_closed(backend_url: str) -> None:
    store = keepstate.open(backend_url)
    scope = store.scope("session", agent="a", id="closed")
    ascope = store.ascope("session", agent="a", id="closed")
    memory = store.memory("a")
    scope.put("k", 1)
    assert asyncio.run(ascope.get("k")) == 1
    store.close()
    with pytest.raises(keepstate.StoreClosed):
        scope.get("k")
    with pytest.raises(keepstate.StoreClosed):
        scope.append("h", [1])
    with pytest.raises(keepstate.StoreClosed):
        asyncio.run(ascope.put("k", 2))
    with pytest.raises(keepstate.StoreClosed), scope.batch() as batch:
        batch.put("k", 3)
    with pytest.raises(keepstate.StoreClosed):
        memory.read("notes/a")
    with pytest.raises(keepstate.StoreClosed):
        store.scope("run", agent="a", id="new").get("k")
    with pytest.raises(keepstate.StoreClosed):
        store.register_session("s", "a")
    store.close()  # again: a no-op
    with keepstate.open(backend_url) as reopened:  # what was written before the close is kept
        assert reopened.scope("session", agent="a", id="closed").get("k") == 1


@ALL
def test_a_scope_used_after_its_with_block_raises_store_closed(backend_url: str) -> None:
    with keepstate.open(backend_url) as store:
        scope = store.scope("agent", agent="a")
        scope.put("k", 1)
    with pytest.raises(keepstate.StoreClosed):
        scope.get("k")


@ALL
def test_many_threads_on_one_store_lose_nothing(backend_url: str) -> None:
    threads, each = 8, 25
    start = threading.Barrier(threads)
    errors: list[BaseException] = []
    with keepstate.open(backend_url) as store:
        scope = store.scope("session", agent="a", id="threads")

        def work(n: int) -> None:
            try:
                start.wait()
                for i in range(each):
                    scope.incr("count")
                    if i % 2:
                        asyncio.run(store.ascope("session", agent="a", id="threads").append("log", [n]))
                    else:
                        scope.append("log", [n])
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)

        running = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
        assert errors == []
        assert scope.get("count") == threads * each
        log = scope.get("log")
        assert sorted(log) == sorted(n for n in range(threads) for _ in range(each))


@LEASES
def test_a_session_store_opened_in_passing_works_under_a_new_loop_per_call(backend_url: str) -> None:
    store = open_session_store(backend_url, lease_seconds=5)
    gc.collect()

    async def bump() -> None:
        async def operation() -> None:
            found = await store.get("s")
            count = 0 if found is None else found.state["n"]
            await store.set("s", SessionState(state={"n": count + 1}))

        await store.transact("s", operation)

    for _ in range(3):
        asyncio.run(bump())
        gc.collect()
    found = asyncio.run(store.get("s"))
    assert found is not None and found.state == {"n": 3}
    asyncio.run(store.aclose())
    with pytest.raises(keepstate.StoreClosed):
        asyncio.run(store.get("s"))
    with pytest.raises(keepstate.StoreClosed):
        asyncio.run(bump())


@HARNESS
def test_a_harness_store_opened_in_passing_works_and_then_says_it_is_closed(backend_url: str) -> None:
    store = open_harness_store(backend_url)
    gc.collect()
    store.create_session("h1")
    assert [record.id for record in store.sessions()] == ["h1"]
    store.close()
    store.close()
    with pytest.raises(keepstate.StoreClosed):
        store.sessions()


FORKED = """
import asyncio, os, sys, keepstate
store = keepstate.open(sys.argv[1])
scope = store.scope("session", agent="a", id="fork")
ascope = store.ascope("session", agent="a", id="fork")
scope.put("parent", 1)
asyncio.run(ascope.put("parent-async", 1))
pid = os.fork()
if pid == 0:
    try:
        scope.append("children", ["sync"])
        asyncio.run(ascope.append("children", ["async"]))
    except keepstate.KeepstateError as error:
        print(f"child: {type(error).__name__}: {error}", flush=True)
        sys.exit(3)
    sys.exit(0)  # a normal exit: the child's finalisers run
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)
scope.append("children", ["parent"])  # the parent's own connections survived the child
asyncio.run(ascope.append("children", ["parent-async"]))
print("children", scope.get("children"), flush=True)
store.close()
"""

SPAWNED = """
import asyncio, multiprocessing, sys, keepstate

def child(scope, ascope):
    scope.append("children", ["sync"])
    asyncio.run(ascope.append("children", ["async"]))

if __name__ == "__main__":
    store = keepstate.open(sys.argv[1])
    scope, ascope = store.scope("session", agent="a", id="spawn"), store.ascope("session", agent="a", id="spawn")
    try:
        process = multiprocessing.get_context("spawn").Process(target=child, args=(scope, ascope))
        process.start()
    except keepstate.KeepstateError as error:
        print(f"parent: {type(error).__name__}: {error}", flush=True)
        sys.exit(3)
    process.join()
    print("child exit", process.exitcode, flush=True)
    print("children", scope.get("children"), flush=True)
    store.close()
"""


def _program(tmp_path: Path, text: str, url: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "program.py"
    path.write_text(text)
    return subprocess.run([sys.executable, str(path), url], capture_output=True, text=True, timeout=EXIT_WITHIN_S)


def _clean(done: subprocess.CompletedProcess[str], children: str) -> None:
    """The program and its child ended well, with every write of both where it belongs."""
    assert done.returncode == 0, done.stderr[-3000:]
    assert "child exit 0" in done.stdout, done.stdout
    assert f"children {children}" in done.stdout, done.stdout
    for dirt in DIRTY:
        assert dirt not in done.stderr, done.stderr[-3000:]


@SHARED
def test_a_forked_child_uses_the_store_with_connections_of_its_own(backend_url: str, tmp_path: Path) -> None:
    _clean(_program(tmp_path, FORKED, backend_url), "['sync', 'async', 'parent', 'parent-async']")


@ALONE
def test_a_forked_child_of_a_store_of_one_process_is_told_so(backend_url: str, tmp_path: Path) -> None:
    done = _program(tmp_path, FORKED, backend_url)
    assert "child exit 3" in done.stdout and "child: InvalidRequest" in done.stdout, done.stdout
    assert "lives in one process" in done.stdout
    assert "children ['parent', 'parent-async']" in done.stdout  # the parent's store is untouched


@SHARED
def test_a_scope_sent_to_a_spawned_process_opens_the_store_there(backend_url: str, tmp_path: Path) -> None:
    _clean(_program(tmp_path, SPAWNED, backend_url), "['sync', 'async']")


@ALONE
def test_a_store_of_one_process_cannot_be_sent_to_another(backend_url: str, tmp_path: Path) -> None:
    done = _program(tmp_path, SPAWNED, backend_url)
    assert done.returncode == 3 and "parent: InvalidRequest" in done.stdout, done.stdout + done.stderr[-2000:]


@PLATFORM
def test_register_session_of_a_store_opened_in_passing(backend_url: str) -> None:
    store = keepstate.open(backend_url)
    assert store.register_session("s1", "a") is True
    scope = store.scope("session", agent="a", id="s1")
    del store
    gc.collect()
    scope.put("k", 1)
    assert scope.get("k") == 1
