"""For the tests of following run events: an ``EventSink`` that records what it is told, and a look at (and
a cut of) a server process's PostgreSQL listening connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection

from keepstate.stores.base import RunEventLog
from keepstate.stores.postgres.events import LISTENER_NAME

WAIT_S = 30.0
"""Only bounds a hang: what is awaited is observed, never timed."""


class Sink:
    def __init__(self) -> None:
        self.woken: list[set[str] | None] = []
        self.ready = asyncio.Event()
        self._changed = asyncio.Event()

    def wake(self, run_ids: Collection[str] | None) -> None:
        self.woken.append(None if run_ids is None else set(run_ids))
        self._changed.set()

    def following(self) -> None:
        self.ready.set()

    async def watched(self) -> None:
        return None

    def told(self, run_id: str | None) -> bool:
        """Whether a wake named ``run_id`` (None: whether a wake named every run)."""
        return any(ids is None or (run_id is not None and run_id in ids) for ids in self.woken)

    async def woken_for(self, run_id: str | None) -> None:
        """Until a wake names ``run_id``, or every run (for None: until a wake names every run)."""
        async with asyncio.timeout(WAIT_S):
            while not (self.told(run_id) if run_id is not None else None in self.woken):
                self._changed.clear()
                await self._changed.wait()


@contextlib.asynccontextmanager
async def following(events: RunEventLog) -> AsyncIterator[Sink]:
    """``events.follow`` running into a ``Sink``, once it follows; cancelled afterwards."""
    sink = Sink()
    task = asyncio.create_task(events.follow(sink))
    try:
        async with asyncio.timeout(WAIT_S):
            await sink.ready.wait()
        yield sink
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def listeners(pid: int, cut: bool = False) -> int:
    """How many listening connections the process ``pid`` has on the local PostgreSQL; with ``cut``, each
    is ended by the server (as a lost connection is) and how many were."""
    import psycopg

    from backends import PG_ADMIN_URL

    counted = "count(pg_terminate_backend(pid))" if cut else "count(*)"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        query = f"SELECT {counted} FROM pg_stat_activity WHERE application_name = %s"
        row = conn.execute(query, (f"{LISTENER_NAME} {pid}",)).fetchone()
    return int(row[0]) if row else 0
