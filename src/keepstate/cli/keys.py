"""``keepstate keys create|list|revoke``: manage API keys straight on the store, as its operator.

``create`` prints a new key (the only time its secret is shown); ``list`` prints the environment's
unrevoked keys without secrets (the store has only their hashes); ``revoke ID`` makes a key 401 on
every server at once. ``list`` and ``revoke`` never create a store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click
import orjson

from ..stores.records import ROLES
from .failures import quiet_libraries, store_errors
from .stores import NEVER_CREATES, READS_ONLY, check_store_option, on_platform

if TYPE_CHECKING:
    from ..platform import Platform

T = TypeVar("T")
STORE = click.option("--store", envvar="KEEPSTATE_STORE", default="sqlite:///keepstate.db", show_default=True,
                     help="Store URL (env KEEPSTATE_STORE).")


def _env_option(help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option("--env", "env", default="default", show_default=True, help=help)


@click.group()
def keys() -> None:
    """Manage API keys."""


@keys.command()
@_env_option("Environment (created if needed).")
@click.option("--role", type=click.Choice(ROLES), required=True)
@click.option("--name", default=None, help="A label for the key.")
@STORE
def create(env: str, role: str, name: str | None, store: str) -> None:
    """Create a key and print it (the only time it is shown)."""

    async def make(platform: Platform) -> str:
        _, secret = await platform.create_key(env, role, name)
        return secret

    click.echo(_on_store(store, env, "create a key in", make, existing=None))


@keys.command(name="list")
@_env_option("Environment.")
@STORE
def list_(env: str, store: str) -> None:
    """Print the environment's keys as JSON: {"keys": [{id, role, name, created_at}]}, no secrets."""

    async def listed(platform: Platform) -> list[dict[str, object]]:
        return [key.public() for key in await platform.repo.list_keys(env)]

    found = _on_store(store, env, "list the keys of", listed, READS_ONLY)
    click.echo(orjson.dumps({"env": env, "keys": found}).decode())


@keys.command()
@_env_option("Environment of the key.")
@STORE
@click.argument("key_id", metavar="ID")
def revoke(env: str, store: str, key_id: str) -> None:
    """Revoke key ID: every server refuses it (401) from now on."""
    from ..errors import NotFound

    async def revoked(platform: Platform) -> None:
        if not await platform.repo.revoke_key(env, key_id):
            raise NotFound(f"no unrevoked key {key_id!r} in environment {env!r}")

    _on_store(store, env, "revoke a key in", revoked)
    click.echo(f"revoked key {key_id}")


def _on_store(
    store: str, env: str, verb: str, action: Callable[[Platform], Awaitable[T]], existing: str | None = NEVER_CREATES
) -> T:
    """``action`` on the store's platform, once ``--env`` and ``--store`` passed their checks; every
    failure one line. Unless ``existing`` is None (create), a SQLite store that is not there is
    refused, ``existing`` saying why."""
    from .. import values
    from ..errors import KeepstateError

    try:
        values.check_key(env, "environment")
    except KeepstateError as error:  # before the store is opened (or created) for nothing
        raise click.BadParameter(error.message, param_hint="--env") from None
    with quiet_libraries(), store_errors(store, verb):
        if existing is None:
            check_store_option(store)
        else:
            check_store_option(store, must_exist=True, why=existing)
        return asyncio.run(on_platform(store, action))
