"""Fixtures of the server suite: real ``keepstate serve`` processes over SQLite, and an ``Api`` helper.

``server`` is one process per test module (tests isolate themselves with fresh keys and sessions);
``lease_server`` runs with a 2 s invocation lease for the lease tests (a beat every 0.2 s keeps it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server_helpers import Api

from serverproc import ServerInfo, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    path: Path = tmp_path_factory.mktemp("server")
    with running_server(f"sqlite:///{path / 'server.db'}") as info:
        yield info


@pytest.fixture(scope="module")
def lease_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    path: Path = tmp_path_factory.mktemp("lease")
    with running_server(f"sqlite:///{path / 'lease.db'}", lease=2) as info:
        yield info


@pytest.fixture
def api(server: ServerInfo) -> Iterator[Api]:
    client = Api(server)
    yield client
    client.close()


@pytest.fixture
def lease_api(lease_server: ServerInfo) -> Iterator[Api]:
    client = Api(lease_server)
    yield client
    client.close()


@pytest.fixture(scope="module")
def server_env_key(server: ServerInfo) -> str:
    """An admin key of another environment of the same server (``keepstate keys create``)."""
    import subprocess
    import sys

    args = [str(arg) for arg in server.process.args]  # type: ignore[union-attr]
    store = args[args.index("--store") + 1]
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from keepstate.cli import main; main(prog_name='keepstate')",
            "keys",
            "create",
            "--env",
            "other",
            "--role",
            "admin",
            "--store",
            store,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()
