"""The server's background sweeps: work that must happen even when nobody asks for it.

Each sweep is a periodic task any server process may run against the shared store, safe to run in
several processes at once (every step it takes is one guarded, atomic store call), and none is
needed for correctness of a read: an expired lease or key is judged at the moment it is read. The
sweeps bound what the store keeps: lost invocations become ``interrupted``; expired keys give
their space back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..errors import KeepstateError
from ..platform import Invocations
from ..stores.base import StateFacet

log = logging.getLogger("keepstate.server")
SWEEP_MIN_S, SWEEP_MAX_S = 0.2, 5.0
STATE_SWEEP_S = 5.0
STATE_SWEEP_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Sweep:
    """One periodic job: its name (for the log), how often, and the call (returns how much it did)."""

    name: str
    period: float
    run: Callable[[], Awaitable[int]]


def sweeps(invocations: Invocations, state: StateFacet, lease_seconds: float) -> list[Sweep]:
    return [
        Sweep("lease", min(max(lease_seconds / 4, SWEEP_MIN_S), SWEEP_MAX_S), invocations.sweep),
        Sweep("expired keys", STATE_SWEEP_S, lambda: _drain(state)),
    ]


async def _drain(state: StateFacet) -> int:
    """Tombstone expired keys a batch at a time until a batch comes back short (never one long call)."""
    total = 0
    while True:
        swept = await state.sweep(STATE_SWEEP_BATCH)
        total += swept
        if swept < STATE_SWEEP_BATCH:
            return total


async def run_forever(sweep: Sweep) -> None:
    """Run ``sweep`` every ``period`` seconds until cancelled; a store outage is logged, not fatal."""
    while True:
        await asyncio.sleep(sweep.period)
        try:
            await sweep.run()
        except KeepstateError as error:
            log.warning("%s sweep failed: %s", sweep.name, error)
