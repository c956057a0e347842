"""``keepstate migrate``: bring a store's schema up to date without serving anything.

Every part opens its own tables and applies its pending steps under the database's lock (the
same happens on first use), so this is for deployments that migrate before they start servers.
"""

from __future__ import annotations

import asyncio

import click

from ..errors import KeepstateError
from ..stores import capabilities_of, open_database
from .failures import quiet_libraries, store_errors
from .stores import check_store_option


async def _migrate(store: str, harness_prefixes: tuple[str, ...]) -> list[str]:
    """Open every facet the store declares (each migrates as it opens); what was migrated."""
    database = open_database(store)
    declared = database.capabilities
    done = ["state and platform" if declared.platform else "state"]
    try:
        await database.state()
        if declared.platform:
            await database.platform()
        if declared.leases:
            await database.leases("sessions")
            done.append("session store")
        for prefix in harness_prefixes:
            from ..harness.records import DEFAULT_CHUNK_SIZE, check_prefix

            declared.require("harness", store)
            database.harness(check_prefix(prefix), DEFAULT_CHUNK_SIZE)
            done.append(f"harness store {prefix!r}")
    finally:
        await database.aclose()
    return done


@click.command()
@click.option(
    "--store",
    envvar="KEEPSTATE_STORE",
    default="sqlite:///keepstate.db",
    show_default=True,
    help="Store URL (env KEEPSTATE_STORE).",
)
@click.option(
    "--harness-prefix",
    "harness_prefixes",
    multiple=True,
    help="Also migrate the harness store with this table prefix (repeatable).",
)
def migrate(store: str, harness_prefixes: tuple[str, ...]) -> None:
    """Create or upgrade the schema of every part of keepstate in a store."""
    with quiet_libraries(), store_errors(store, "migrate"):
        check_store_option(store)
        _check_prefixes(store, harness_prefixes)
        done = asyncio.run(_migrate(store, harness_prefixes))
    click.echo(f"migrated: {', '.join(done)}")


def _check_prefixes(store: str, prefixes: tuple[str, ...]) -> None:
    """Refuse bad ``--harness-prefix`` values before any part is migrated, not halfway through."""
    from ..harness.records import check_prefix

    try:
        if prefixes:
            capabilities_of(store).require("harness", store)
        for prefix in prefixes:
            check_prefix(prefix)
    except KeepstateError as error:
        raise click.BadParameter(error.message, param_hint="--harness-prefix") from None
