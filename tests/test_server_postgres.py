"""The server suite of ``tests/server/`` again, against ``keepstate serve`` over PostgreSQL.

Those tests take their server through the ``server`` / ``lease_server`` fixtures only, so rather
than rewrite them this module collects them a second time with PostgreSQL-backed fixtures: every
``test_*`` of the listed modules (sessions, runs, hold/decide/resume, claims, state and CAS, every
error code, the fuzzers) runs here on a fresh PostgreSQL schema. Left out: tests that start their
own SQLite servers (they prove nothing about PostgreSQL). The ``api`` helpers and the fixtures that
build on ``server`` are taken from ``tests/server/conftest.py`` itself, so the two runs cannot drift.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import fresh_pg_url
from serverproc import ServerInfo, running_server

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "server"))
REUSED = ("test_server_runs", "test_server_errors", "test_server_concurrency", "test_server_fuzz")
SQLITE_ONLY = {"test_claims_are_exclusive_across_two_server_processes"}


def _load(path: Path, name: str) -> Any:
    """A conftest loaded under its own name (both are called ``conftest``), for its functions."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_servers = _load(HERE / "server" / "conftest.py", "keepstate_tests_server_conftest")
api, lease_api, server_env_key = _servers.api, _servers.lease_api, _servers.server_env_key

for _name in REUSED:  # the tests and the module-level fixtures (``live``, ``headers_for``) they use
    globals().update(
        {
            name: value
            for name, value in vars(importlib.import_module(_name)).items()
            if (name.startswith("test_") and name not in SQLITE_ONLY) or hasattr(value, "_fixture_function_marker")
        }
    )


@pytest.fixture(scope="module")
def pg_store() -> Iterator[str]:
    """One fresh PostgreSQL schema for this module's servers (``pg_url`` is per test)."""
    with fresh_pg_url() as url:
        yield url


@pytest.fixture(scope="module")
def server(pg_store: str) -> Iterator[ServerInfo]:
    with running_server(pg_store) as info:
        yield info


@pytest.fixture(scope="module")
def lease_server(pg_store: str) -> Iterator[ServerInfo]:
    """A second process on the same database with a 1 s invocation lease."""
    with running_server(pg_store, lease=1) as info:
        yield info


def test_the_suite_was_collected_here() -> None:
    """Guard against a silent empty run if the reused modules are renamed."""
    names = [name for name in globals() if name.startswith("test_")]
    assert len(names) > 30
    assert "test_turn_flow_with_state_hold_and_resume" in names


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/v0/runs/a%00b"),
        ("GET", "/v0/sessions/a%00b"),
        ("DELETE", "/v0/sessions/a%00b"),
        ("DELETE", "/v0/keys/a%00b"),
        ("POST", "/v0/runs/a%00b/cancel"),
        ("POST", "/v0/runs/a%00b/decision"),
    ],
)
def test_an_id_holding_nul_names_nothing(api: Any, method: str, path: str) -> None:
    """PostgreSQL text cannot hold U+0000 (SQLite can): such an id is 404, never a driver error's 500."""
    answer = api.http.request(method, path, json={"approved": True}, headers=api.admin)
    assert (answer.status_code, answer.json()["error"]) == (404, "not_found")


def test_an_invocation_id_holding_nul_is_refused_not_500(api: Any) -> None:
    api.start("nul")
    headers = {"x-agentos-run-token": api.claim("nul")["token"]}
    for kind in ("heartbeat", "complete"):
        answer = api.http.post(f"/v0/invocations/a%00b/{kind}", json={}, headers=headers)
        assert answer.status_code in (401, 404), answer.text
