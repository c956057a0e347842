"""Fixtures shared by every suite: real backends, each test on its own fresh data.

PostgreSQL and Redis are found at their default local addresses, or at
``KEEPSTATE_TEST_POSTGRES`` / ``KEEPSTATE_TEST_REDIS``. A test on an absent service is skipped
with one clear line, unless ``KEEPSTATE_REQUIRE_SERVICES=1`` (CI), where it fails instead.

Isolation: every PostgreSQL test gets its own schema (``options=-csearch_path=...`` in the URL),
every Redis test its own key prefix (``?prefix=...``), every SQLite test its own file; all are
dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from serverproc import reachable

PG_ADMIN_URL = os.environ.get("KEEPSTATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("KEEPSTATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
REQUIRE_SERVICES = os.environ.get("KEEPSTATE_REQUIRE_SERVICES") == "1"


def need_service(name: str, url: str, default_port: int) -> None:
    """Skip (or, under KEEPSTATE_REQUIRE_SERVICES=1, fail) when a service is absent."""
    if reachable(url, default_port):
        return
    message = f"{name} is not reachable at {url}"
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} and KEEPSTATE_REQUIRE_SERVICES=1")
    pytest.skip(f"{message}: skipping the {name} tests")


def _with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL store URL whose tables live in a fresh schema, dropped afterwards."""
    need_service("PostgreSQL", PG_ADMIN_URL, 5432)
    import psycopg

    schema = f"ks_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield _with_query(PG_ADMIN_URL, "options=" + quote(f"-csearch_path={schema}"))
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis store URL with a fresh key prefix, whose keys are deleted afterwards."""
    need_service("Redis", REDIS_URL, 6379)
    import redis

    prefix = f"kstest:{uuid.uuid4().hex[:12]}:"
    try:
        yield _with_query(REDIS_URL, f"prefix={prefix}")
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(match=prefix + "*", count=1000):
            client.delete(key)
        client.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'keepstate.db'}"


@pytest.fixture
def backend_url(request: pytest.FixtureRequest) -> str:
    """The URL of one fresh store of the backend named by the test's parameter."""
    name = request.param
    if name == "memory":
        return f"memory://{uuid.uuid4().hex}"
    fixture = {"sqlite": "sqlite_url", "postgres": "pg_url", "redis": "redis_url"}[name]
    return str(request.getfixturevalue(fixture))
