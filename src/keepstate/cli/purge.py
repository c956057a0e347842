"""``keepstate purge --older-than DAYS [--dry-run]``: delete finished runs past their retention, and
session-store records (sessions, retained tokens, free leases) more than ``--session-grace`` days
(default 1) after they expired.

Runs that are done, failed, interrupted, cancelled or expired and were last updated more than DAYS
ago go, with their invocations, a batch of ``upkeep.PURGE_BATCH`` at a time (each batch its own
short transaction), so servers serving the same store keep serving. The command lowers its own CPU
priority first (``PURGE_NICENESS``): on a machine it shares with servers, the servers come first.
Queued, running and held runs and every state value stay, and so does a session whose expiry is
suspended (executing). The answers of idempotent writes (``Idempotency-Key``) go once they are a day
old, whatever ``--older-than`` says. ``--dry-run`` only counts. Nothing is created: the store must exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
from typing import TYPE_CHECKING

import click

from ..clock import MAX_AGE_DAYS
from .failures import quiet_libraries, store_errors
from .numbers import Finite
from .stores import NEVER_CREATES, check_store_option, on_platform

if TYPE_CHECKING:
    from ..platform import Platform

PURGE_NICENESS = 10
"""Added to the purge process's niceness: its own CPU (all of it on SQLite, where the deletes run in
this process) goes to the servers first; a database server elsewhere is not affected."""


async def _purge(platform: Platform, days: float, grace: float, dry_run: bool) -> tuple[int, int, int, int]:
    """How many runs, session-store records and idempotent writes' answers were (or, with ``dry_run``,
    would be) purged, and the runs' cutoff."""
    from ..clock import days_ago, now_ms
    from ..platform.upkeep import count_expired_sessions, forget_answers, lease_spaces, purge, purge_sessions
    from ..stores.remembered import KEEP_MS

    now = now_ms()
    before, expired_before = days_ago(days, now), days_ago(grace, now)
    leases = await lease_spaces(platform.database)
    if dry_run:
        runs = await platform.repo.count_purgeable(before)
        sessions = await count_expired_sessions(leases, expired_before)
        return runs, sessions, await platform.repo.count_remembered(now - KEEP_MS), before
    runs = await purge(platform.repo, before)
    sessions = await purge_sessions(leases, expired_before)
    return runs, sessions, await forget_answers(platform.repo, now), before


@click.command()
@click.option(
    "--store",
    envvar="KEEPSTATE_STORE",
    default="sqlite:///keepstate.db",
    show_default=True,
    help="Store URL (env KEEPSTATE_STORE).",
)
@click.option(
    "--older-than",
    "days",
    required=True,
    type=Finite(0, MAX_AGE_DAYS),
    help=f"Purge finished runs last updated more than this many days ago (fractions; at most {MAX_AGE_DAYS:,}).",
)
@click.option(
    "--session-grace",
    "grace",
    default=1.0,
    show_default=True,
    type=Finite(0, MAX_AGE_DAYS),
    help="Purge session-store records this many days after they expired.",
)
@click.option("--dry-run", is_flag=True, help="Only count what would go.")
def purge(store: str, days: float, grace: float, dry_run: bool) -> None:
    """Delete finished runs (and their invocations) older than --older-than days, and session-store
    records expired more than --session-grace days ago; never state."""
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
        runs, sessions, answers, before = asyncio.run(on_platform(store, lambda p: _purge(p, days, grace, dry_run)))
    when = datetime.datetime.fromtimestamp(before / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    verb = "would purge" if dry_run else "purged"
    click.echo(f"{verb} {runs} finished run(s) last updated before {when} ({days:g} days ago)")
    click.echo(f"{verb} {sessions} session-store record(s) expired more than {grace:g} day(s) ago")
    click.echo(f"{verb} {answers} answer(s) of idempotent writes kept more than 24 hours")
