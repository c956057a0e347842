"""``keepstate keys create --env NAME --role ROLE``: print a new key, straight on the store."""

from __future__ import annotations

import asyncio

import click

from ..stores.records import ROLES
from .failures import quiet_libraries, store_errors
from .stores import check_store_option


@click.group()
def keys() -> None:
    """Manage API keys."""


@keys.command()
@click.option("--env", "env", default="default", show_default=True, help="Environment (created if needed).")
@click.option("--role", type=click.Choice(ROLES), required=True)
@click.option("--name", default=None, help="A label for the key.")
@click.option("--store", envvar="KEEPSTATE_STORE", default="sqlite:///keepstate.db", show_default=True)
def create(env: str, role: str, name: str | None, store: str) -> None:
    """Create a key and print it (the only time it is shown)."""
    from .. import values
    from ..errors import KeepstateError

    try:
        values.check_key(env, "environment")
    except KeepstateError as error:  # before the store is opened (or created) for nothing
        raise click.BadParameter(error.message, param_hint="--env") from None
    with quiet_libraries(), store_errors(store, "create a key in"):
        check_store_option(store)
        secret = asyncio.run(_create(store, env, role, name))
    click.echo(secret)


async def _create(store: str, env: str, role: str, name: str | None) -> str:
    from ..platform import open_platform

    platform = await open_platform(store)
    try:
        _, secret = await platform.create_key(env, role, name)
        return secret
    finally:
        await platform.aclose()
