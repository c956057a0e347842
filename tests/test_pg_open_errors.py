"""Opening a PostgreSQL store that cannot be reached fails fast, with the server's own reason.

The pool alone only logs why it cannot connect and, after its whole wait (``POOL_WAIT_S``), says
"pool initialization incomplete". Every opener therefore makes one direct connection first, so a
refused port or a missing database is ``Unavailable`` within the connect, carrying the reason. That
it fails fast is shown without a clock: no pool is ever opened (so none is waited for).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg_pool
import pytest

import keepstate
from keepstate.harness import open_harness_store
from keepstate.platform import open_platform
from keepstate.sessions import open_session_store
from keepstate.stores import open_database

CLOSED_PORT = "postgresql://postgres@127.0.0.1:1/test"  # port 1: nothing listens there


def _missing_database(pg_url: str) -> str:
    """``pg_url`` (the local server, found reachable) naming a database that does not exist."""
    return urlunsplit(urlsplit(pg_url)._replace(path=f"/ks_missing_{uuid.uuid4().hex[:12]}"))


def _url(case: str, request: pytest.FixtureRequest) -> tuple[str, str]:
    """The URL of the case and the reason its error must carry."""
    if case == "closed port":
        return CLOSED_PORT, "refused"
    return _missing_database(request.getfixturevalue("pg_url")), "does not exist"


async def _state_facet(url: str) -> None:
    database = open_database(url)  # connects on first use
    try:
        await database.state()
    finally:
        await database.aclose()


async def _first_session_call(url: str) -> None:
    store = open_session_store(url)  # connects on first use
    try:
        await store.get("s")
    finally:
        await store.aclose()


OPENERS: dict[str, Callable[[str], Any]] = {
    "keepstate.open": keepstate.open,
    "open_database": lambda url: asyncio.run(_state_facet(url)),
    "open_session_store": lambda url: asyncio.run(_first_session_call(url)),
    "open_platform": lambda url: asyncio.run(open_platform(url)),
    "open_harness_store": open_harness_store,
}


@pytest.mark.parametrize("case", ["closed port", "missing database"])
@pytest.mark.parametrize("opener", OPENERS)
def test_unreachable_postgres_fails_fast_with_the_real_reason(
    case: str, opener: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, reason = _url(case, request)
    opened: list[object] = []
    for pool in (psycopg_pool.ConnectionPool, psycopg_pool.AsyncConnectionPool):
        monkeypatch.setattr(pool, "open", lambda self, *args, **kwargs: opened.append(self))
    with pytest.raises(keepstate.Unavailable) as caught:
        OPENERS[opener](url)
    assert reason in str(caught.value), str(caught.value)
    assert "pool initialization incomplete" not in str(caught.value)
    assert opened == [], "a pool was opened (and waited for) before the reason was known"
    assert caught.value.status == 503
