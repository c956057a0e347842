"""Losing the database: every call fails fast with Unavailable, and the same backend recovers by itself.

Each test starts a PRIVATE server in a temp folder on a free port (PostgreSQL via initdb + pg_ctl, run
as the ``postgres`` user when we are root, since PostgreSQL refuses to run as root; Redis via
``redis-server --save ''``), then stops and restarts it. The machine's shared servers are never touched.
Where a private server cannot be started the tests skip with the reason, unless
KEEPSTATE_REQUIRE_SERVICES=1, where they fail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import keepstate
from keepstate.stores import open_database
from keepstate.stores.base import Database
from keepstate.stores.postgres import PostgresDatabase
from keepstate.stores.postgres.db import CHECK_IDLE_S
from private_services import PrivatePostgres, PrivateRedis, private_pg, private_redis

__all__ = ["private_pg", "private_redis"]  # fixtures, used by name
HANG_S = 60.0
"""Bounds a call's wait for Unavailable, and the wait for recovery: a hang guard, never a speed (idle, a
call fails within the pool's 5 s wait or the 3 s connect timeout; a loaded machine can take far longer)."""
NS = "default/agent/outage/"
pytestmark = pytest.mark.timeout(180)


def _calls(database: Database) -> dict[str, Callable[[], Awaitable[Any]]]:
    async def backend_of() -> Any:
        return await database.state()

    async def export() -> Any:
        backend = await backend_of()
        return [record async for record in backend.records()]

    async def call(name: str, *args: Any, **kwargs: Any) -> Any:
        return await getattr(await backend_of(), name)(*args, **kwargs)

    return {
        "get": lambda: call("get", NS, "k"),
        "put": lambda: call("put", NS, "k", b"2"),
        "put_if": lambda: call("put", NS, "k", b"2", if_version=1),
        "delete": lambda: call("delete", NS, "other"),
        "append": lambda: call("append", NS, "log", [b"1"]),
        "keys": lambda: call("keys", NS),
        "drop": lambda: call("drop", "default/agent/none/"),
        "records": export,
        "ping": database.ping,
    }


async def _each_call_is_unavailable(backend: Database) -> None:
    """Every call raises Unavailable (503, Retry-After), none hanging (HANG_S)."""
    for name, call in _calls(backend).items():
        with pytest.raises(keepstate.Unavailable) as caught:
            await asyncio.wait_for(call(), HANG_S)
        assert caught.value.status == 503 and caught.value.retry_after >= 1, name


async def _recovers(backend: Database) -> None:
    """Wait until the same backend answers again, retrying as a client honouring Retry-After would."""
    give_up = time.monotonic() + HANG_S
    while True:
        try:
            await backend.ping()
            return
        except keepstate.Unavailable:
            assert time.monotonic() < give_up, "the backend did not recover by itself"
            await asyncio.sleep(0.2)


async def test_postgres_down_means_unavailable_and_back_means_working(private_pg: PrivatePostgres) -> None:
    database = open_database(private_pg.url)
    backend = await database.state()
    try:
        assert await backend.put(NS, "k", b"1") == 1
        await backend.append(NS, "log", [b"0"])
        private_pg.stop()
        await _each_call_is_unavailable(database)
        # what makes the calls that follow fail fast (they wait DOWN_WAIT_S for a connection, not the
        # pool's whole wait): the pool knows the server is down; asserted, not timed
        assert isinstance(database, PostgresDatabase)
        pool, give_up = await database.pool(), time.monotonic() + HANG_S
        while not getattr(pool, "down", False):
            assert time.monotonic() < give_up, "the pool never marked the server down"
            await asyncio.sleep(0.05)
        await _each_call_is_unavailable(database)  # nothing got stuck in between
        assert getattr(pool, "down", False)
        private_pg.start()
        await _recovers(database)
        entry = await backend.get(NS, "k")
        assert entry is not None and (entry.data, entry.version) == (b"1", 1)  # committed = kept
        assert await backend.put(NS, "k", b"3", if_version=1) == 2
        assert await backend.append(NS, "log", [b"1"]) == (2, 2)
    finally:
        await database.aclose()


async def test_a_connection_broken_while_unused_is_replaced_before_its_next_call(private_pg: PrivatePostgres) -> None:
    """PostgreSQL restarts while nobody calls: the pooled connection is dead but nobody saw it die.
    It sat unused past CHECK_IDLE_S, so the pool checks it before handing it out: the next call works."""
    database = open_database(private_pg.url)
    backend = await database.state()
    try:
        assert await backend.put(NS, "k", b"1") == 1
        private_pg.stop()
        private_pg.start()
        time.sleep(CHECK_IDLE_S + 0.2)
        entry = await backend.get(NS, "k")  # the first call after the restart, not a retry
        assert entry is not None and entry.data == b"1"
    finally:
        await database.aclose()


def test_postgres_outage_through_the_embedded_sync_face(private_pg: PrivatePostgres) -> None:
    with keepstate.open(private_pg.url) as store:
        scope = store.scope("agent", agent="outage")
        scope.put("k", 1)
        private_pg.stop()
        for call in (lambda: scope.get("k"), lambda: scope.put("k", 2), lambda: scope.append("l", [1])):
            with pytest.raises(keepstate.Unavailable):
                call()  # a hang is bounded by the module's timeout
        private_pg.start()
        deadline = time.monotonic() + HANG_S
        while True:
            try:
                assert scope.update("k", lambda n: n + 1) == 2
                break
            except keepstate.Unavailable:
                assert time.monotonic() < deadline, "the embedded store did not recover by itself"
                time.sleep(0.2)


def test_opening_a_store_whose_postgres_is_down_is_unavailable(private_pg: PrivatePostgres) -> None:
    private_pg.stop()
    with pytest.raises(keepstate.Unavailable):
        keepstate.open(private_pg.url)  # a hang is bounded by the module's timeout


async def test_redis_down_means_unavailable_and_back_means_working(private_redis: PrivateRedis) -> None:
    database = open_database(private_redis.url)
    backend = await database.state()
    try:
        assert await backend.put(NS, "k", b"1") == 1
        private_redis.stop()
        await _each_call_is_unavailable(database)
        await _each_call_is_unavailable(database)
        private_redis.start()  # no persistence: it comes back empty, and the scripts load again
        await _recovers(database)
        assert await backend.put(NS, "k", b"1", if_version=0) == 1
        assert await backend.append(NS, "log", [b"1"]) == (1, 1)
        assert await backend.keys(NS) == [("k", 1), ("log", 1)]
    finally:
        await database.aclose()
