"""``keepstate backup --store sqlite:///x.db OUT.db``: a consistent copy of a live SQLite store.

The copy is SQLite's online backup (``stores/sqlite/backup.py``), taken while servers keep writing,
then opened and checked before it is put in place. PostgreSQL and Redis have their own tools, which
do this better than keepstate could (docs/deploy.md, "Backup and restore"): this says which, in one line.
"""

from __future__ import annotations

import click

from ..stores import scheme_of
from .failures import quiet_libraries, store_errors
from .stores import NEVER_CREATES, check_store_option

OTHER_TOOLS = {
    "postgresql": "use pg_dump (or a base backup with WAL archiving for point-in-time recovery)",
    "redis": "use Redis's own persistence: copy an RDB snapshot (BGSAVE) or the AOF",
    "memory": "a memory:// store lives in one process and has nothing to back up",
}


@click.command()
@click.option("--store", envvar="KEEPSTATE_STORE", default="sqlite:///keepstate.db", show_default=True,
              help="The SQLite store to copy (env KEEPSTATE_STORE).")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.argument("out", metavar="OUT.db", type=click.Path(dir_okay=False))
def backup(store: str, out: str, force: bool) -> None:
    """Copy a live SQLite store to OUT.db, consistently, and check the copy."""
    try:
        scheme = scheme_of(store)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--store") from None
    if scheme != "sqlite":
        tool = OTHER_TOOLS["postgresql" if scheme == "postgres" else scheme]
        raise click.BadParameter(f"keepstate backup copies SQLite stores; for {scheme}:// {tool} "
                                 "(docs/deploy.md, Backup and restore)", param_hint="--store")
    from ..stores.sqlite.backup import backup as copy
    from ..stores.sqlite.db import sqlite_path

    with quiet_libraries(), store_errors(store, "back up"):
        check_store_option(store, must_exist=True, why=NEVER_CREATES)
        report = copy(sqlite_path(store), out, replace=force)
    schema = ", ".join(f"{component} {version}" for component, version in report.schema.items())
    click.echo(f"backed up {store} to {out}: {report.bytes:,} bytes, {report.pages:,} pages, "
               f"integrity ok, schema {schema}")
