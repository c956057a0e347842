"""``keepstate keys create --env NAME --role ROLE``: print a new key, straight on the store."""

from __future__ import annotations

import asyncio

import click

from ..stores.records import ROLES


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
    from ..errors import KeepstateError

    try:
        secret = asyncio.run(_create(store, env, role, name))
    except (KeepstateError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    click.echo(secret)


async def _create(store: str, env: str, role: str, name: str | None) -> str:
    from ..platform import open_platform

    platform = await open_platform(store)
    try:
        _, secret = await platform.create_key(env, role, name)
        return secret
    finally:
        await platform.aclose()
