"""Run a real ``keepstate serve`` process for tests: the server and SDK suites both use this.

``running_server(store_url)`` starts ``keepstate serve`` (this interpreter's ``keepstate.cli.main``)
on a free local port with a known admin key, waits until ``/readyz`` answers 200, yields a
``ServerInfo`` and on exit sends SIGTERM and waits for the process (killing it only if it does
not stop in time). The server's output goes to a log file whose tail is shown if it fails to start.

Tests run in parallel (pytest-xdist), so a port found free may be taken by another worker's server
before ours binds it: a server that exits saying its address is in use is started again on another port.
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
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

START_TIMEOUT_S = 60.0
PORT_TRIES = 5
"""Starts on a fresh port after an 'address already in use': another worker took the one found free."""
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


@contextmanager
def closed_port() -> Iterator[int]:
    """A local port where nothing listens and nothing can, while the block runs: it is bound (which
    keeps another test's server, in another worker, off it) but never listens, so connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


class PortTaken(RuntimeError):
    """The server could not bind the port found free: another process bound it first."""


def _wait_ready(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = log_path.read_text()
            if "already in use" in log.lower():
                raise PortTaken(log[-4000:])
            raise RuntimeError(f"keepstate serve exited with {process.returncode}:\n{log[-4000:]}")
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
    python: str = sys.executable,
    port: int | None = None,
) -> Iterator[ServerInfo]:
    """A ``keepstate serve`` process over ``store_url``; stopped with SIGTERM on exit. ``python``: the
    interpreter whose keepstate serves (another virtual environment's, to test an install). ``port``:
    this one (a server started again where its clients know it), not a free one found."""
    key = admin_key or f"ks_test_{secrets.token_urlsafe(24)}"
    env = {**os.environ, "KEEPSTATE_ADMIN_KEY": key, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    for attempt in range(PORT_TRIES):
        try:
            started = _start(store_url, env, lease, extra_args, python, port)
        except PortTaken:
            if attempt == PORT_TRIES - 1 or port is not None:
                raise
            continue
        with started as info:
            yield info
        return


def _start(
    store_url: str, env: dict[str, str], lease: float, extra_args: tuple[str, ...], python: str, port: int | None
) -> AbstractContextManager[ServerInfo]:
    """Start a server on ``port`` (a free one when None) and wait until it is ready; raises PortTaken when
    the port was taken."""
    port = port or free_port()
    args = [
        python,
        "-c",
        _MAIN,
        "serve",
        "--store",
        store_url,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--invocation-lease",
        str(lease),
        *extra_args,
    ]
    log_file = tempfile.NamedTemporaryFile(prefix="keepstate-serve-", suffix=".log", delete=False)  # noqa: SIM115
    log_path = Path(log_file.name)
    process = subprocess.Popen(args, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    log_file.close()
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, log_path)
    except BaseException:
        stop(process)
        log_path.unlink(missing_ok=True)
        raise
    return _serving(ServerInfo(url, env["KEEPSTATE_ADMIN_KEY"], process, log_path))


@contextmanager
def _serving(info: ServerInfo) -> Iterator[ServerInfo]:
    try:
        yield info
    finally:
        stop(info.process)
        info.log_path.unlink(missing_ok=True)
