"""``keepstate worker``: one ready line, one line per invocation, no line per HTTP request; and a
server that is down or a URL that is malformed is one line and a non-zero exit, not a quiet retry.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import keepstate
from cliproc import assert_one_line_error, finish, run_cli, start_cli
from serverproc import ServerInfo, closed_port, running_server

AGENTS = """
import keepstate

worker = keepstate.Worker()

@worker.agent("echo")
def echo(inv):
    return {"echo": inv.input}

@worker.agent("ask")
def ask(inv):
    if inv.kind == "start":
        inv.hold({"question": "ok?"})
    return "resumed"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    with running_server(f"sqlite:///{tmp_path_factory.mktemp('worker') / 'w.db'}") as info:
        yield info


@pytest.fixture
def module_dir(tmp_path: Path) -> Path:
    (tmp_path / "agents_mod.py").write_text(AGENTS)
    return tmp_path


def _worker_key(server: ServerInfo) -> str:
    with keepstate.Client(server.url, key=server.admin_key) as admin:
        key = admin.keys.create("worker").key
    assert key is not None
    return key


def _read_until(process: subprocess.Popen[str], needle: str, timeout: float = 30) -> list[str]:
    """Lines of the worker's stderr up to and including the first one holding ``needle``."""
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"{needle!r} never came; got {lines}")


def _turns(server: ServerInfo) -> None:
    """Three turns: one done, one held then resumed."""
    with keepstate.Client(server.url, key=server.admin_key) as admin:
        done = admin.runs.start("echo", {"n": 1})
        assert admin.runs.wait(done.id, timeout=30).status == "done"
        held = admin.runs.start("ask", None)
        assert admin.runs.wait(held.id, timeout=30).status == "held"
        admin.runs.decide(held.id, approved=True)
        assert admin.runs.wait(held.id, timeout=30).status == "done"


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_a_ready_line_then_one_line_per_invocation_and_http_lines_only_when_debugging(
    server: ServerInfo, module_dir: Path, level: str
) -> None:
    process = start_cli(
        "worker",
        "agents_mod",
        "--url",
        server.url,
        "--key",
        _worker_key(server),
        "--poll",
        "1",
        "--concurrency",
        "2",
        "--log-level",
        level,
        cwd=module_dir,
        stderr=subprocess.PIPE,
    )
    try:
        ready = _read_until(process, "claiming")
        assert f"claiming invocations of ask, echo from {server.url} (concurrency 2)" in ready[-1]
        _turns(server)
        process.send_signal(signal.SIGTERM)
        rest = _read_until(process, "stopped after")
    finally:
        finish(process)
    assert process.returncode == 0
    lines = ready + rest
    http = [line for line in lines if "HTTP Request" in line or " httpx" in line or " httpcore" in line]
    outcomes = [line for line in lines if "INFO keepstate.worker" in line and "of run" in line]
    assert [line.rsplit(": ", 1)[1].strip() for line in outcomes] == ["done", "held", "done"]
    if level == "INFO":
        assert http == [], "httpx logged requests at INFO"
        assert len(lines) == 1 + 3 + 2  # ready, three outcomes, "stopping" and "stopped after 3"
    else:
        assert len(http) >= 6, "--log-level DEBUG shows the HTTP requests"
    assert "stopped after 3 invocation(s)" in lines[-1]


def test_a_server_that_is_down_is_one_line(module_dir: Path) -> None:
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}"
        done = run_cli("worker", "agents_mod", "--url", url, "--key", "ks_whatever", cwd=module_dir)
    assert_one_line_error(done, f"cannot reach keepstate at {url}", status=1)


def test_a_url_that_is_not_a_keepstate_server_is_one_line(server: ServerInfo, module_dir: Path) -> None:
    done = run_cli("worker", "agents_mod", "--url", f"{server.url}/not/here", "--key", "ks_x", cwd=module_dir)
    assert_one_line_error(done, "no keepstate server answers", "404", status=1)


@pytest.mark.parametrize("url", ["htp://127.0.0.1:8420", "127.0.0.1:8420", "http://127.0.0.1:99999", "http://"])
def test_a_malformed_url_is_one_line_before_anything_runs(module_dir: Path, url: str) -> None:
    for flag, env in ((["--url", url], {}), ([], {"KEEPSTATE_URL": url})):
        done = run_cli("worker", "agents_mod", *flag, "--key", "ks_x", cwd=module_dir, env=env)
        assert_one_line_error(done, repr(url), "http://host:port", status=2)


def test_a_refused_key_is_one_line(server: ServerInfo, module_dir: Path) -> None:
    """Alone: no "claiming invocations" line before it (the worker says so only once a claim was answered)."""
    done = run_cli("worker", "agents_mod", "--url", server.url, "--key", "ks_not_a_key", cwd=module_dir)
    line = assert_one_line_error(done, "unauthorized", status=1)
    assert line.startswith("Error: ") and "claiming" not in done.stderr
