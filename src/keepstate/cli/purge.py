"""``keepstate purge --older-than DAYS [--dry-run]``: delete finished runs past their retention.

Runs that are done, failed, interrupted, cancelled or expired and were last updated more than DAYS
ago go, with their invocations, a batch of ``upkeep.PURGE_BATCH`` at a time (each batch its own
short transaction), so servers serving the same store keep serving. The command lowers its own CPU
priority first (``PURGE_NICENESS``): on a machine it shares with servers, the servers come first.
Queued, running and held runs and every state value stay. ``--dry-run`` only counts. Nothing is
created: the store must exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
from typing import TYPE_CHECKING

import click

from .failures import quiet_libraries, store_errors
from .stores import NEVER_CREATES, check_store_option, on_platform

if TYPE_CHECKING:
    from ..platform import Platform

PURGE_NICENESS = 10
"""Added to the purge process's niceness: its own CPU (all of it on SQLite, where the deletes run in
this process) goes to the servers first; a database server elsewhere is not affected."""


async def _purge(platform: Platform, days: float, dry_run: bool) -> tuple[int, int]:
    """How many runs were (or, with ``dry_run``, would be) purged, and the cutoff."""
    from ..clock import now_ms
    from ..platform.upkeep import cutoff, purge

    before = cutoff(days, now_ms())
    if dry_run:
        return await platform.repo.count_purgeable(before), before
    return await purge(platform.repo, before), before


@click.command()
@click.option("--store", envvar="KEEPSTATE_STORE", default="sqlite:///keepstate.db", show_default=True,
              help="Store URL (env KEEPSTATE_STORE).")
@click.option("--older-than", "days", required=True, type=click.FloatRange(min=0),
              help="Purge finished runs last updated more than this many days ago (fractions allowed).")
@click.option("--dry-run", is_flag=True, help="Only count the runs that would go.")
def purge(store: str, days: float, dry_run: bool) -> None:
    """Delete finished runs (and their invocations) older than --older-than days; never state."""
    from ..errors import KeepstateError
    from ..stores import capabilities_of

    with quiet_libraries(), store_errors(store, "purge"):
        check_store_option(store, must_exist=True, why=NEVER_CREATES)
        try:
            capabilities_of(store).require("platform", store)
            capabilities_of(store).require("shared", store)
        except KeepstateError as error:
            raise click.BadParameter(error.message, param_hint="--store") from None
        with contextlib.suppress(OSError):
            os.nice(PURGE_NICENESS)
        count, before = asyncio.run(on_platform(store, lambda platform: _purge(platform, days, dry_run)))
    when = datetime.datetime.fromtimestamp(before / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    verb = "would purge" if dry_run else "purged"
    click.echo(f"{verb} {count} finished run(s) last updated before {when} ({days:g} days ago)")
