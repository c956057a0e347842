"""Platform stores as an earlier release left them, for the tests of each schema step that followed:
migrated through their first steps only and holding rows written with the SQL of that time.

``OLD_STORES`` parametrises ``backend_url`` over the stores that outlive a process (SQLite and PostgreSQL,
by capability); ``made_before`` builds the old store there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from backends import declaring
from keepstate.stores.postgres import db as pg_db
from keepstate.stores.postgres import platform_sql as pg_steps
from keepstate.stores.sql import platform as sql
from keepstate.stores.sqlite.db import SqliteFile, sqlite_path

Row = tuple[str, Sequence[object]]
"""An INSERT with ``?`` placeholders and its values."""

OLD_STORES = pytest.mark.parametrize("backend_url", declaring("platform", "shared"), indirect=True)


async def made_before(url: str, steps: int, rows: Iterable[Row]) -> None:
    """Migrate the platform store at ``url`` through its first ``steps`` steps only, then write ``rows``
    in one transaction."""
    if url.startswith("sqlite"):
        file = SqliteFile(sqlite_path(url))
        try:
            file.migrate("platform", sql.SQLITE_SCHEMA[:steps])
            with file.transaction() as conn:
                for statement, values in rows:
                    conn.execute(statement, values)
        finally:
            file.close()
        return
    pool = await pg_db.open_async_pool(url)
    try:
        await pg_db.amigrate(pool, "platform", pg_steps.STEPS[:steps])
        async with pg_db.aconnection(pool) as pg_conn, pg_conn.transaction():
            for statement, values in rows:
                await pg_conn.execute(pg_steps.pg(statement), values)
    finally:
        await pool.close()
