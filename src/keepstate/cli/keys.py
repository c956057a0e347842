"""``keepstate keys create|list|revoke``: manage API keys straight on the store, as its operator.

``create`` prints a new key (the only time its secret is shown) alone on standard output, so a script
can take it, and what it made (id, role, name) on standard error for the person; ``list`` prints the
environment's unrevoked keys as a table for people, as JSON with ``--json`` for scripts, never a
secret (the store has only their hashes); ``revoke ID`` makes a key 401 on every server at once.
``list`` and ``revoke`` never create a store.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
import orjson

from ..stores.records import ROLES
from .failures import quiet_libraries, store_errors
from .stores import NEVER_CREATES, READS_ONLY, check_store_option, on_platform

if TYPE_CHECKING:
    from ..platform import Platform

T = TypeVar("T")
STORE = click.option(
    "--store",
    envvar="KEEPSTATE_STORE",
    default="sqlite:///keepstate.db",
    show_default=True,
    help="Store URL (env KEEPSTATE_STORE).",
)


def _env_option(help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option("--env", "env", default="default", show_default=True, help=help)


@click.group()
def keys() -> None:
    """Manage API keys."""


@keys.command()
@_env_option("Environment (created if needed).")
@click.option("--role", type=click.Choice(ROLES), required=True)
@click.option("--name", default=None, help="A label for the key.")
@click.option("--json", "as_json", is_flag=True, help="Print {id, role, name, env, key} as one JSON line.")
@STORE
def create(env: str, role: str, name: str | None, as_json: bool, store: str) -> None:
    """Create a key and print it (the only time it is shown); its id goes to standard error."""
    from ..errors import KeepstateError
    from ..protocol import check_key_name

    try:
        check_key_name(name)
    except KeepstateError as error:  # before the store is opened (or created) for nothing
        raise click.BadParameter(error.message, param_hint="--name") from None

    async def make(platform: Platform) -> tuple[dict[str, object], str]:
        key, secret = await platform.create_key(env, role, name)
        return key.public(), secret

    made, secret = _on_store(store, env, "create a key in", make, existing=None)
    if as_json:
        click.echo(orjson.dumps({**made, "env": env, "key": secret}).decode())
        return
    click.echo(secret)
    label = f" {name!r}" if name else ""
    click.echo(f"created {role} key {made['id']}{label} in {env}: the key above is shown only this once", err=True)


@keys.command(name="list")
@_env_option("Environment.")
@click.option("--json", "as_json", is_flag=True, help='Print {"env", "keys": [{id, role, name, created_at}]}.')
@STORE
def list_(env: str, as_json: bool, store: str) -> None:
    """Print the environment's keys, oldest first, without secrets: a table, or JSON with --json."""

    async def listed(platform: Platform) -> list[dict[str, object]]:
        return [key.public() for key in await platform.repo.list_keys(env)]

    found = _on_store(store, env, "list the keys of", listed, READS_ONLY)
    if as_json:
        click.echo(orjson.dumps({"env": env, "keys": found}).decode())
    else:
        click.echo(key_table(env, found))


def key_table(env: str, found: list[dict[str, Any]]) -> str:
    """Keys as aligned columns for people, times in UTC to the second (``--json`` has the milliseconds)."""
    if not found:
        return f"no keys in environment {env}"
    rows = [("ID", "ROLE", "NAME", "CREATED (UTC)")]
    rows += [(key["id"], key["role"], key["name"] or "-", utc(key["created_at"])) for key in found]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[3]]) for row in rows
    )


def utc(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


@keys.command()
@_env_option("Environment of the key.")
@STORE
@click.argument("key_id", metavar="ID")
def revoke(env: str, store: str, key_id: str) -> None:
    """Revoke key ID: every server refuses it (401) from now on, and the invocations it claimed end."""

    async def revoked(platform: Platform) -> list[str]:
        return await platform.end_key(env, key_id)

    ended = _on_store(store, env, "revoke a key in", revoked)
    held = f"; {len(ended)} running invocation(s) it claimed ended, their runs interrupted" if ended else ""
    click.echo(f"revoked key {key_id}{held}")


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
