"""pytest plugin proving the shims' swap path: registers the target ``swap-probe``, whose stand-ins
are the frameworks' own classes, subclassed to write one line per instance to the file named by
``KEEPSTATE_SWAP_PROBE_LOG``. A suite run against it passes only if the swapped store works, and
the log shows the suite really used the stand-in (test_upstream_swap.py). Load it with ``-p``
before the suite's shim, which reads the targets when it is imported.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import targets
from agents import SQLiteSession
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.sqlite import SqliteStore
from langgraph.store.sqlite.aio import AsyncSqliteStore

TARGET = "swap-probe"


def _record(instance: object) -> None:
    with open(os.environ["KEEPSTATE_SWAP_PROBE_LOG"], "a") as log:
        log.write(type(instance).__name__ + "\n")


class _Logged:
    """Logs each instance once it is built (first in the bases, so it wraps their __init__)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _record(self)


class ProbeSaver(_Logged, InMemorySaver):
    pass


class ProbeStore(_Logged, SqliteStore):
    pass


class ProbeAsyncStore(_Logged, AsyncSqliteStore):
    pass


class ProbeSession(_Logged, SQLiteSession):
    pass


@contextmanager
def _probe_saver() -> Iterator[ProbeSaver]:
    yield ProbeSaver()


targets.CHECKPOINTERS[TARGET] = _probe_saver
targets.STORES[TARGET] = {"SqliteStore": ProbeStore, "AsyncSqliteStore": ProbeAsyncStore}
targets.SESSIONS[TARGET] = ProbeSession
