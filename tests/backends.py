"""Which backends a suite runs over, and a fresh store of each: chosen by what each store declares,
never by a hand-kept list.

Every suite parametrises its ``backend_url`` fixture (``conftest.py``) with ``declaring(...)`` of the
facets it exercises, so a backend that declares a facet is held to that facet's conformance suite.
``fresh_url(name, folder)`` makes a fresh store of one backend for a fixture of any scope (a module's
server, say): its own SQLite file, PostgreSQL schema or Redis key prefix, dropped afterwards, so tests
running in parallel (pytest-xdist workers) never share data.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

from keepstate.stores import capabilities_of
from serverproc import reachable

SAMPLE_URLS = {
    "memory": "memory://",
    "sqlite": "sqlite:///keepstate.db",
    "postgres": "postgresql://localhost/db",
    "redis": "redis://localhost",
    "redis-cluster": "redis+cluster://localhost:7000",
}
"""One URL of each backend the fixtures can make a fresh store of."""
NETWORK = ["postgres", "redis"]
"""The backends reached over TCP, which the outage tests cut with a proxy (a cluster's clients reach the
nodes it announces, past any proxy: tests/test_backend_redis_cluster.py stops a node instead)."""
PG_ADMIN_URL = os.environ.get("KEEPSTATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("KEEPSTATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
REQUIRE_SERVICES = os.environ.get("KEEPSTATE_REQUIRE_SERVICES") == "1"
SERVED = ["http"]
"""Stores reached through a running ``keepstate serve`` instead of opened (``http://``): the session
store's routes, which the session-store suites run over as well (a server on SQLite, a fresh
environment per test)."""


def declaring(*facets: str) -> list[str]:
    """The backends whose store declares every one of ``facets`` (``shared``, ``platform``, ``leases``,
    ``harness``, ``documents``, ``cross_scope_batches``...); with none, every backend (they all have the
    state facet)."""
    return [name for name, url in SAMPLE_URLS.items() if all(getattr(capabilities_of(url), facet) for facet in facets)]


def lacking(facet: str) -> list[str]:
    """The backends whose store does not declare ``facet``: where a suite checks the clear refusal."""
    return [name for name in SAMPLE_URLS if name not in declaring(facet)]


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


@contextmanager
def fresh_pg_url(admin_url: str = PG_ADMIN_URL) -> Iterator[str]:
    """A PostgreSQL store URL whose tables live in a fresh schema, dropped afterwards (on the local
    server, or on the one at ``admin_url``)."""
    if admin_url == PG_ADMIN_URL:
        need_service("PostgreSQL", PG_ADMIN_URL, 5432)
    import psycopg

    schema = f"ks_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield _with_query(admin_url, "options=" + quote(f"-csearch_path={schema}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@contextmanager
def fresh_redis_url() -> Iterator[str]:
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


@contextmanager
def fresh_redis_cluster_url() -> Iterator[str]:
    """A store URL on this process's local Redis Cluster (started on first use) with a fresh key
    prefix, whose keys are deleted afterwards."""
    import redis_cluster

    cluster = redis_cluster.shared_cluster()
    prefix = f"kstest:{uuid.uuid4().hex[:12]}:"
    try:
        yield cluster.url(prefix)
    finally:
        cluster.delete_prefix(prefix)


@contextmanager
def fresh_url(name: str, folder: Path) -> Iterator[str]:
    """A fresh store of backend ``name``; a SQLite file goes in ``folder`` (a fresh temp folder)."""
    if name == "memory":
        yield f"memory://{uuid.uuid4().hex}"
    elif name == "sqlite":
        yield f"sqlite:///{folder / 'keepstate.db'}"
    else:
        makers = {"postgres": fresh_pg_url, "redis": fresh_redis_url, "redis-cluster": fresh_redis_cluster_url}
        with makers[name]() as url:
            yield url


VECTOR_INDEXED = {"postgres": "postgres-pgvector"}
"""Backends whose store may hold a vector index (PostgreSQL with the pgvector extension), and the name
of a fresh store of that backend with it: the semantic search suite runs on both."""


def with_vector_indexes(names: list[str]) -> list[str]:
    """``names`` and, after each that may hold a vector index, that backend with one."""
    return [variant for name in names for variant in (name, VECTOR_INDEXED.get(name)) if variant is not None]
