"""How ``keepstate serve`` starts: the port and the flags first, the store and the admin key after.

A busy port, a bad flag or a weak ``KEEPSTATE_ADMIN_KEY`` is one line and a non-zero exit, with no
store file created and no key printed. A good start prints the address it really listens on
(also for ``--port 0``) and serves there, with one process or several.
"""

from __future__ import annotations

import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cliproc import assert_one_line_error, finish, run_cli, start_cli
from serverproc import free_port

STRONG = f"ks_{secrets.token_urlsafe(32)}"
KEY_PATTERN = re.compile(r"\bks_[A-Za-z0-9_-]{20,}")
START_TIMEOUT_S = 30.0


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another server listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_busy_port_is_refused_before_the_store_is_opened_or_a_key_made(tmp_path: Path, busy_port: int) -> None:
    done = run_cli(
        "serve",
        "--port",
        str(busy_port),
        "--store",
        f"sqlite:///{tmp_path / 'new.db'}",
        cwd=tmp_path,
        env={"KEEPSTATE_ADMIN_KEY": ""},
    )
    assert_one_line_error(done, f"127.0.0.1:{busy_port}", "already in use")
    assert not KEY_PATTERN.search(done.stderr + done.stdout), "an admin key was printed"
    assert list(tmp_path.iterdir()) == [], "the store was created"


def test_a_busy_port_is_refused_with_several_workers_too(tmp_path: Path, busy_port: int) -> None:
    done = run_cli("serve", "--port", str(busy_port), "--workers", "2", cwd=tmp_path, env={"KEEPSTATE_ADMIN_KEY": ""})
    assert_one_line_error(done, "already in use")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key", ["my-secret-admin", "x" * 64, "abcdefgh" * 3, "0123456789" * 2])
def test_a_weak_admin_key_is_refused_before_anything_else(tmp_path: Path, key: str) -> None:
    done = run_cli("serve", "--port", str(free_port()), cwd=tmp_path, env={"KEEPSTATE_ADMIN_KEY": key})
    assert_one_line_error(done, "KEEPSTATE_ADMIN_KEY", "too weak", "secrets.token_urlsafe(32)")
    assert key not in done.stderr, "the refused secret was echoed"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--port", "abc"], {}, "--port"),
        (["--port", "99999"], {}, "--port"),
        (["--port", "-1"], {}, "--port"),
        ([], {"KEEPSTATE_PORT": "eighty"}, "--port"),
        (["--workers", "0"], {}, "--workers"),
        (["--workers", "many"], {}, "--workers"),
        (["--invocation-lease", "0"], {}, "--invocation-lease"),
        (["--invocation-lease", "soon"], {}, "--invocation-lease"),
        ([], {"KEEPSTATE_INVOCATION_LEASE": "-5"}, "--invocation-lease"),
        (["--store", "memory://", "--workers", "2"], {}, "memory://"),
        (["--prot", "8420"], {}, "--prot"),
    ],
)
def test_bad_flags_are_one_line_and_create_nothing(
    tmp_path: Path, args: list[str], env: dict[str, str], needle: str
) -> None:
    done = run_cli("serve", *args, cwd=tmp_path, env={"KEEPSTATE_ADMIN_KEY": STRONG, **env})
    assert_one_line_error(done, needle, "keepstate serve --help", status=2)
    assert list(tmp_path.iterdir()) == []


def test_a_host_that_cannot_be_bound_is_one_line(tmp_path: Path) -> None:
    done = run_cli(
        "serve",
        "--host",
        "no-such-host.invalid",
        "--port",
        str(free_port()),
        cwd=tmp_path,
        env={"KEEPSTATE_ADMIN_KEY": STRONG},
    )
    assert_one_line_error(done, "cannot listen on no-such-host.invalid")
    assert list(tmp_path.iterdir()) == []


def _started(process: subprocess.Popen[str]) -> str:
    """The address the server says it serves on, once ``/readyz`` answers there."""
    assert process.stderr is not None
    line = process.stderr.readline()
    found = re.search(r"serving (http://127\.0\.0\.1:(\d+))", line)
    assert found, f"no serving line: {line!r}"
    url = found.group(1)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return url
        except httpx.HTTPError:
            time.sleep(0.05)
    raise AssertionError(f"{url} never became ready")


@pytest.mark.parametrize("workers", [1, 2])
def test_port_zero_serves_on_the_port_it_prints(tmp_path: Path, workers: int) -> None:
    process = start_cli(
        "serve",
        "--port",
        "0",
        "--workers",
        str(workers),
        "--store",
        f"sqlite:///{tmp_path / 's.db'}",
        env={"KEEPSTATE_ADMIN_KEY": STRONG},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        url = _started(process)
        assert not url.endswith(":0")
        keys = httpx.get(f"{url}/v0/keys", headers={"Authorization": f"Bearer {STRONG}"})
        assert keys.status_code == 200 and keys.json()["keys"][0]["role"] == "admin"
    finally:
        process.send_signal(signal.SIGTERM)
        assert finish(process) in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM once it stopped
