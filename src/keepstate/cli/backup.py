"""``keepstate backup --store sqlite:///x.db OUT.db``: a consistent copy of a live store in one file.

A store that can be copied into one file while in use declares it (``Capabilities.file_backup``: SQLite,
whose online backup is ``stores/sqlite/backup.py``); the copy is opened and checked before it is put in
place. The others have their own tools, which do this better than keepstate could (docs/deploy.md,
"Backup and restore"): the refusal names them, in one line.
"""

from __future__ import annotations

import click

from ..errors import KeepstateError
from ..stores import backup as copy
from ..stores import capabilities_of
from .failures import quiet_libraries, store_errors
from .stores import NEVER_CREATES, check_store_option


@click.command()
@click.option(
    "--store",
    envvar="KEEPSTATE_STORE",
    default="sqlite:///keepstate.db",
    show_default=True,
    help="The SQLite store to copy (env KEEPSTATE_STORE).",
)
@click.option("--force", is_flag=True, help="Replace OUT if it exists (never the store or one of its files).")
@click.argument("out", metavar="OUT.db", type=click.Path(dir_okay=False))
def backup(store: str, out: str, force: bool) -> None:
    """Copy a live SQLite store to OUT.db, consistently, and check the copy."""
    try:
        capabilities_of(store).require("file_backup", store)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--store") from None
    except KeepstateError as error:
        raise click.BadParameter(
            f"{error.message} (docs/deploy.md, Backup and restore)", param_hint="--store"
        ) from None
    with quiet_libraries(), store_errors(store, "back up"):
        check_store_option(store, must_exist=True, why=NEVER_CREATES)
        report = copy(store, out, replace=force)
    schema = ", ".join(f"{component} {version}" for component, version in report.schema.items())
    click.echo(
        f"backed up {store} to {out}: {report.bytes:,} bytes, {report.pages:,} pages, integrity ok, schema {schema}"
    )
