"""Processes that used a shared store (SQLite, PostgreSQL, Redis) end cleanly, whether or not they closed it.

A pool left open keeps worker tasks on its event loop; at interpreter exit they used to be
destroyed pending ("Task was destroyed but it is pending!"). Each case runs in its own Python
process, writes, and exits (with or without closing): exit code 0 in time, and a stderr with no
such message, no traceback and no "exception ignored". The server's shutdown is checked the same way.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import keepstate
from backends import declaring, fresh_url
from keepstate.stores.faces import EventLoopThread
from serverproc import running_server, stop

EXIT_WITHIN_S = 30.0
"""Generous: a close waits at most a few seconds for a pool; a hang is what this catches."""
DIRTY = ("Task was destroyed", "Traceback", "Exception ignored", "never awaited")

EMBEDDED = """
import sys, keepstate
store = keepstate.open(sys.argv[1])
scope = store.scope("session", agent="a", id="x")
scope.put("k", 1)
assert scope.get("k") == 1
print("wrote", flush=True)
if sys.argv[2] == "close":
    store.close()
"""

SESSIONS = """
import asyncio, sys
from keepstate.sessions import SessionState, open_session_store

async def main(url, close):
    store = open_session_store(url, lease_seconds=1)
    async def each(n):
        await store.transact(f"s{n}", lambda: store.set(f"s{n}", SessionState(state={"n": n})))
    await asyncio.gather(*(each(n) for n in range(8)))  # the pool grows past one connection
    print("wrote", flush=True)
    if close:
        await store.aclose()

url, close, runner = sys.argv[1], sys.argv[2] == "close", sys.argv[3]
if runner == "asyncio.run":
    asyncio.run(main(url, close))
else:  # a loop the program runs itself and never closes
    asyncio.new_event_loop().run_until_complete(main(url, close))
"""


@pytest.fixture(params=declaring("shared"))
def network_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store another process can open: each of these runs in a process of its own."""
    with fresh_url(request.param, tmp_path) as url:
        yield url


def _run_clean(program: str, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote" in done.stdout
    for dirt in DIRTY:
        assert dirt not in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("ending", ["close", "exit without close"])
def test_embedded_store_process_exits_cleanly(network_url: str, ending: str) -> None:
    _run_clean(EMBEDDED, network_url, ending.split()[0])


@pytest.mark.parametrize("runner", ["asyncio.run", "own loop"])
@pytest.mark.parametrize("ending", ["close", "exit without close"])
def test_session_store_process_exits_cleanly(network_url: str, ending: str, runner: str) -> None:
    _run_clean(SESSIONS, network_url, ending.split()[0], runner)


def test_an_embedded_store_dropped_unclosed_is_closed_by_the_collector(network_url: str) -> None:
    def portal_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "keepstate-portal"]

    before = len(portal_threads())
    store = keepstate.open(network_url)
    store.scope("session", agent="a", id="gc").put("k", 1)
    assert len(portal_threads()) <= before + 1  # one, for a store whose calls run on a loop of its own
    del store
    gc.collect()
    assert len(portal_threads()) == before  # its pool closed and its loop thread ended


def test_closing_twice_is_a_no_op(network_url: str) -> None:
    store = keepstate.open(network_url)
    store.close()
    store.close()


def test_server_on_postgres_stops_cleanly(pg_url: str) -> None:
    with running_server(pg_url) as server:
        for _ in range(5):
            assert httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200
        stop(server.process)  # SIGTERM, as on leaving the block, but the log is still there to read
        log = server.log()
    assert "stopped, store closed" in log
    for dirt in DIRTY:
        assert dirt not in log, log[-3000:]


def test_a_stopped_loop_thread_hears_that_its_work_ended() -> None:
    """``stop()`` returns once the loop's own ending finished, not when its bound gave up on it: a close
    that waited out the bound (11 s) on every store with a sync face was how the suite grew slow."""
    portal = EventLoopThread()
    assert portal.run(asyncio.sleep(0, "answered")) == "answered"
    portal.stop()
    assert portal.ending is not None and portal.ending.done() and portal.ending.exception() is None
    with pytest.raises(keepstate.StoreClosed):
        portal.run(asyncio.sleep(0))
