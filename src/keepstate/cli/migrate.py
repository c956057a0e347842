"""``keepstate migrate``: bring a store's schema up to date without serving anything.

Every part opens its own tables and applies its pending steps under the database's lock (the
same happens on first use), so this is for deployments that migrate before they start servers.
"""

from __future__ import annotations

import asyncio

import click

from ..errors import KeepstateError
from ..stores import scheme_of
from .failures import quiet_libraries, store_errors
from .stores import check_store_option


async def _migrate(store: str, harness_prefixes: tuple[str, ...]) -> list[str]:
    done = []
    if scheme_of(store) != "redis":
        from ..platform import open_platform

        platform = await open_platform(store)
        await platform.aclose()
        done.append("state and platform")
    else:
        from ..stores import open_backend

        await (await open_backend(store)).aclose()
        done.append("state")
    from ..sessions import open_session_store

    sessions = open_session_store(store)
    await sessions.get("keepstate-migrate")  # the session store creates its tables on first use
    await sessions.aclose()
    done.append("session store")
    for prefix in harness_prefixes:
        from ..harness import open_harness_store

        open_harness_store(store, prefix=prefix).close()
        done.append(f"harness store {prefix!r}")
    return done


@click.command()
@click.option("--store", envvar="KEEPSTATE_STORE", default="sqlite:///keepstate.db", show_default=True,
              help="Store URL (env KEEPSTATE_STORE).")
@click.option("--harness-prefix", "harness_prefixes", multiple=True,
              help="Also migrate the harness store with this table prefix (repeatable).")
def migrate(store: str, harness_prefixes: tuple[str, ...]) -> None:
    """Create or upgrade the schema of every part of keepstate in a store."""
    with quiet_libraries(), store_errors(store, "migrate"):
        _check_prefixes(check_store_option(store), harness_prefixes)
        done = asyncio.run(_migrate(store, harness_prefixes))
    click.echo(f"migrated: {', '.join(done)}")


def _check_prefixes(scheme: str, prefixes: tuple[str, ...]) -> None:
    """Refuse bad ``--harness-prefix`` values before any part is migrated, not halfway through."""
    from ..harness.records import check_prefix

    if prefixes and scheme == "redis":
        raise click.BadParameter("the harness store runs on SQLite or PostgreSQL, not Redis",
                                 param_hint="--harness-prefix")
    for prefix in prefixes:
        try:
            check_prefix(prefix)
        except KeepstateError as error:
            raise click.BadParameter(error.message, param_hint="--harness-prefix") from None
