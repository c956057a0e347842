"""Run a real ``keepstate serve`` process for tests: the server and SDK suites both use this.

``running_server(store_url)`` starts ``keepstate serve`` (this interpreter's ``keepstate.cli.main``)
on a free local port with a known admin key, waits until ``/readyz`` answers 200, yields a
``ServerInfo`` and on exit sends SIGTERM and waits for the process (killing it only if it does
not stop in time). The server's output goes to a log file whose tail is shown if it fails to start.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

START_TIMEOUT_S = 30.0
_MAIN = "from keepstate.cli import main; main(prog_name='keepstate')"
STOP_TIMEOUT_S = 15.0


@dataclass
class ServerInfo:
    """A running server: its base URL, its bootstrap admin key and its process."""

    url: str
    admin_key: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def reachable(url: str, default_port: int) -> bool:
    """Whether something listens at ``url``'s host and port (``default_port`` when it names none)."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"keepstate serve exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"keepstate serve did not become ready:\n{log_path.read_text()[-4000:]}")


def stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM, wait; SIGKILL only when it does not stop in time. Returns the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


@contextmanager
def running_server(
    store_url: str,
    admin_key: str | None = None,
    lease: float = 30,
    extra_env: Mapping[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[ServerInfo]:
    """A ``keepstate serve`` process over ``store_url``; stopped with SIGTERM on exit."""
    key = admin_key or f"ks_test_{secrets.token_urlsafe(24)}"
    port = free_port()
    env = {**os.environ, "KEEPSTATE_ADMIN_KEY": key, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    args = [sys.executable, "-c", _MAIN, "serve", "--store", store_url, "--host", "127.0.0.1",
            "--port", str(port), "--invocation-lease", str(lease), *extra_args]
    log_file = tempfile.NamedTemporaryFile(prefix="keepstate-serve-", suffix=".log", delete=False)  # noqa: SIM115
    log_path = Path(log_file.name)
    process = subprocess.Popen(args, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    log_file.close()
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, log_path)
        yield ServerInfo(url, key, process, log_path)
    finally:
        stop(process)
        log_path.unlink(missing_ok=True)
