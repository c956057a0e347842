"""Keeping a store in shape while it serves: lost leases, runs queued too long, expired state keys,
finished runs past retention, session-store sessions expired for a day.

Each is a guarded step in the store that any number of servers (and a ``keepstate purge`` beside them)
may run at the same moment, so every server runs all of them and nothing depends on one server being
up: a lost invocation is interrupted once, an overdue run expires once (``PlatformFacet.expire_queued``),
a purged run is deleted once. The sweeps are only what makes the *shown* status catch up: a run past
its queue deadline is never claimed and never blocks its session even if no sweep ran, because the
claim's and the turn's own statements judge the deadline; an expired key is absent the moment it
expires, and its sweep only gives the space back (``StateFacet.sweep``, a batch at a time).

A purge deletes in batches (``PURGE_BATCH`` runs, oldest first, each batch one short transaction) with
a pause between them ``PURGE_DUTY`` times as long as the batch took, so the servers' own writes are
never held up behind one long delete and a purge never takes more than a twentieth of what the machine
(or the database) gives it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from ..clock import DAY_MS, days_ago, now_ms
from ..errors import KeepstateError
from ..stores.base import LEASE_SPACES, Database, LeaseFacet, PlatformFacet, StateFacet
from ..stores.remembered import KEEP_MS
from .invocations import Invocations
from .service import Platform

log = logging.getLogger("keepstate.upkeep")

SWEEP_MIN_S, SWEEP_MAX_S = 0.2, 5.0
"""The lease sweep runs every quarter of the lease, within these bounds."""
QUEUE_SWEEP_S = 1.0
"""How often a server expires overdue queued runs (queue timeouts are whole seconds or more)."""
KEYS_SWEEP_S = 5.0
KEYS_SWEEP_BATCH = 1000
PURGE_BATCH = 1000
PURGE_PAUSE_S = 0.02
"""The least pause between two purge batches: the lock is free for the servers' writes."""
PURGE_DUTY = 19.0
"""After each batch a purge pauses this many times as long as the batch took (at least ``PURGE_PAUSE_S``),
so it works at most a twentieth of its time, however loaded the machine is: on PostgreSQL the deletes run in
the database, where no niceness of ours reaches, and the serving path's tail latency grows with the share
of time anything else keeps a CPU busy (bench/RESULTS.md, Lifecycle)."""
PURGE_EVERY_S = 600.0
"""How often a server with ``--retention-days`` purges (less for a retention under a few hours)."""
PURGE_FIRST_S = 1.0
SESSION_GRACE_DAYS = 1.0
"""A session-store session is purged this long after its ``expires_at`` (it stays readable until then)."""
SESSIONS_SWEEP_S = 60.0
ANSWERS_SWEEP_S = 600.0
"""How often a server forgets the answers of idempotent writes past ``remembered.KEEP_MS``."""


async def purge(
    repo: PlatformFacet,
    before: int,
    batch: int = PURGE_BATCH,
    pause: float = PURGE_PAUSE_S,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete every finished run last updated before ``before`` (and its invocations), a batch at a
    time; how many runs went. Runs finishing meanwhile are left for the next purge."""
    return await in_batches(lambda limit: repo.purge_runs(before, limit), batch, pause, progress)


async def purge_sessions(leases: Sequence[LeaseFacet], before: int, batch: int = PURGE_BATCH) -> int:
    """Delete the session-store records of every lease space (sessions, retained tokens, free lease rows)
    that expired before ``before``, a batch at a time; how many went. A session whose expiry is suspended
    (executing) stays."""
    return sum([await in_batches(partial(facet.purge, before), batch, PURGE_PAUSE_S, None) for facet in leases])


async def forget_answers(repo: PlatformFacet, now: int, batch: int = PURGE_BATCH) -> int:
    """Forget the answers of idempotent writes kept longer than ``remembered.KEEP_MS``, a batch at a
    time; how many went."""
    return await in_batches(partial(repo.purge_remembered, now - KEEP_MS), batch, PURGE_PAUSE_S, None)


async def lease_spaces(database: Database) -> list[LeaseFacet]:
    """The lease facet of every space of the store (sessions, retained tokens), none when it has no leases."""
    if not database.capabilities.leases:
        return []
    return [await database.leases(space) for space in LEASE_SPACES]


async def count_expired_sessions(leases: Sequence[LeaseFacet], before: int) -> int:
    """How many records ``purge_sessions(leases, before)`` would delete (a dry run)."""
    return sum([await facet.count_purgeable(before) for facet in leases])


async def in_batches(
    step: Callable[[int], Awaitable[int]], batch: int, pause: float, progress: Callable[[int], None] | None
) -> int:
    """Call ``step(batch)`` until it deletes fewer than ``batch``, pausing ``PURGE_DUTY`` times as long
    as each call took (at least ``pause``); the total."""
    total = 0
    while True:
        started = time.perf_counter()
        gone = await step(batch)
        total += gone
        if progress is not None:
            progress(total)
        if gone < batch:
            return total
        await asyncio.sleep(max(pause, (time.perf_counter() - started) * PURGE_DUTY))


async def expire_queued(platform: Platform) -> int:
    """Overdue queued runs → expired; waiters on them (``GET /v0/runs/{id}?wait=``) are woken."""
    expired = await platform.repo.expire_queued(now_ms())
    if expired:
        platform.changed.notify()
    return expired


async def free_expired_keys(state: StateFacet) -> int:
    """Tombstone expired keys a batch at a time until a batch comes back short (never one long call)."""
    total = 0
    while True:
        swept = await state.sweep(KEYS_SWEEP_BATCH)
        total += swept
        if swept < KEYS_SWEEP_BATCH:
            return total


class Upkeep:
    """The background tasks of one server process: lease sweep, queue expiry, expired keys, expired
    session-store sessions (with ``leases``), and purge with a retention."""

    def __init__(
        self, invocations: Invocations, retention_days: float | None = None, leases: Sequence[LeaseFacet] = ()
    ) -> None:
        if retention_days is not None:
            days_ago(retention_days, 0)  # ValueError now for a retention no purge could use
        self.invocations = invocations
        self.platform = invocations.platform
        self.retention_days = retention_days
        self.leases = leases
        self.counts = dict.fromkeys(
            ("interrupted", "expired", "purged", "keys_expired", "sessions_purged", "answers_forgotten"), 0
        )
        """Runs this process's sweeps interrupted, expired and purged, expired keys it freed, session-store
        records it purged and idempotent writes' answers it forgot (metrics)."""
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        lease_period = min(max(self.platform.lease_seconds / 4, SWEEP_MIN_S), SWEEP_MAX_S)
        self._spawn("interrupted", lease_period, self.invocations.sweep)
        self._spawn("expired", QUEUE_SWEEP_S, lambda: expire_queued(self.platform))
        self._spawn("keys_expired", KEYS_SWEEP_S, lambda: free_expired_keys(self.platform.state))
        self._spawn("answers_forgotten", ANSWERS_SWEEP_S, self._forget_answers, first=PURGE_FIRST_S)
        if self.leases:
            self._spawn("sessions_purged", SESSIONS_SWEEP_S, self._purge_sessions, first=PURGE_FIRST_S)
        if self.retention_days is not None:
            period = min(PURGE_EVERY_S, max(QUEUE_SWEEP_S, self.retention_days * DAY_MS / 1000 / 24))
            self._spawn("purged", period, self._purge, first=PURGE_FIRST_S)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _purge(self) -> int:
        assert self.retention_days is not None
        gone = await purge(self.platform.repo, days_ago(self.retention_days, now_ms()))
        if gone:
            log.info("purged %d finished runs older than %s days", gone, self.retention_days)
        return gone

    async def _forget_answers(self) -> int:
        return await forget_answers(self.platform.repo, now_ms())

    async def _purge_sessions(self) -> int:
        return await purge_sessions(self.leases, days_ago(SESSION_GRACE_DAYS, now_ms()))

    def _spawn(self, what: str, period: float, step: Callable[[], Awaitable[int]], first: float | None = None) -> None:
        """Run ``step`` every ``period`` seconds, adding what it returns to ``counts[what]``."""
        task = asyncio.create_task(self._every(what, period, step, first), name=f"keepstate sweep: {what}")
        self._tasks.append(task)

    async def _every(self, what: str, period: float, step: Callable[[], Awaitable[int]], first: float | None) -> None:
        """The first round after ``first``, then every ``period`` jittered by a tenth, so that servers started
        together drift apart. A store that cannot be reached is a warning, anything else a logged bug;
        either way the next round tries again, so one failure never stops the sweeping."""
        await asyncio.sleep(period if first is None else first)
        while True:
            try:
                self.counts[what] += await step()
            except KeepstateError as error:
                log.warning("sweep (%s) failed: %s", what, error)
            except Exception:
                log.exception("sweep (%s) failed", what)
            await asyncio.sleep(period * random.uniform(0.9, 1.1))
