"""Private PostgreSQL and Redis servers that a test may stop and start (never the machine's own).

PostgreSQL via initdb + pg_ctl in a temp folder on a free port, run as the ``postgres`` user when
we are root (PostgreSQL refuses to run as root); Redis via ``redis-server --save ''``. Where one
cannot be started the test skips with the reason, unless KEEPSTATE_REQUIRE_SERVICES=1 (CI), where
it fails.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverproc import free_port

REQUIRE_SERVICES = os.environ.get("KEEPSTATE_REQUIRE_SERVICES") == "1"


def _cannot(reason: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(f"{reason} and KEEPSTATE_REQUIRE_SERVICES=1")
    pytest.skip(reason)


class PrivatePostgres:
    """initdb + pg_ctl in a temp folder; ``stop()``/``start()`` as many times as a test likes."""

    def __init__(self, bindir: str, root: Path) -> None:
        self.bindir, self.root, self.port = bindir, root, free_port()
        self.data = root / "data"
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_postgres, f"{self.bindir}/{tool}", *args], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-w", "-t", "30", "-o", options, "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        subprocess.run(
            [*self.as_postgres, f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A redis-server without persistence on a free port; ``stop()`` kills it, ``start()`` runs a new one."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?prefix=outage:"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start listening")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    found = next((d for d in reversed(bindirs) if os.path.exists(f"{d}/initdb")), None) or (
        os.path.dirname(shutil.which("initdb") or "") or None
    )
    if found is None:
        _cannot("no initdb found (/usr/lib/postgresql/*/bin or PATH) to start a private PostgreSQL")
    server = PrivatePostgres(str(found), Path(tempfile.mkdtemp(prefix="keepstate-pg-")))
    try:
        server.init()
        server.start()
    except (OSError, subprocess.SubprocessError) as error:
        server.destroy()
        _cannot(f"could not start a private PostgreSQL: {error}")
    yield server
    server.destroy()


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        _cannot("redis-server is not installed: cannot start a private Redis")
    server = PrivateRedis()
    try:
        server.start()
    except (OSError, RuntimeError) as error:
        server.stop()
        _cannot(f"could not start a private Redis: {error}")
    yield server
    server.stop()
