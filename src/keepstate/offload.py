"""Blocking work moved off the event loop, each kind in a bounded thread pool of its own.

asyncio's default executor is one pool for everything, so eight slow full-text searches in it hold
up every request body parsed and every listing read behind them (``bench/bench_memory_cost.py``:
another agent's 100 KB write took 141 ms, at worst 553 ms, behind eight clients searching a long
phrase in one shared pool; 19 ms with a pool per kind; 6 ms idle). Here each kind of blocking work
has its own pool, bounded, so a kind only ever queues behind itself:

- ``parse``: request bodies big enough to parse off the loop (``server.http``);
- ``scan``: listings, export pages and counts that read many rows of a SQLite file;
- ``search``: full-text searches of a SQLite file (FTS5).

Pools are made on first use in each process (a forked child makes its own: threads do not survive
a fork) and live as long as it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

POOL_SIZES = {"parse": 4, "scan": 2, "search": 2}
"""Threads per kind. SQLite reads run in C without the GIL, so two searches use both cores of a small
machine; more would only queue inside the pool instead of here."""

_pools: dict[str, ThreadPoolExecutor] = {}
_owner = os.getpid()
_lock = threading.Lock()


def pool(kind: str) -> ThreadPoolExecutor:
    """The pool of ``kind`` in this process (made on first use)."""
    global _owner
    with _lock:
        if _owner != os.getpid():  # a forked child: the parent's threads are not here
            _pools.clear()
            _owner = os.getpid()
        found = _pools.get(kind)
        if found is None:
            found = _pools[kind] = ThreadPoolExecutor(POOL_SIZES[kind], thread_name_prefix=f"keepstate-{kind}")
        return found


async def run(kind: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a thread of the ``kind`` pool, awaited from the event loop."""
    return await asyncio.get_running_loop().run_in_executor(pool(kind), functools.partial(fn, *args, **kwargs))
