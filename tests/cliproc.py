"""Run the real ``keepstate`` command in subprocesses and judge how it failed.

``run_cli(*args)`` runs this interpreter's ``keepstate.cli.main`` (as ``keepstate`` on a PATH
would), ``start_cli`` the same without waiting, and ``assert_one_line_error`` holds a failed run
to the spec's rule: a non-zero exit, exactly one line on standard error that names the problem,
and no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAIN = "from keepstate.cli import main; main(prog_name='keepstate')"
TIMEOUT_S = 60


@dataclass
class Done:
    """A finished command: exit status and both outputs as text."""

    returncode: int
    stdout: str
    stderr: str


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without any ``KEEPSTATE_*`` setting of the machine, plus ``extra``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KEEPSTATE_")}
    return {**env, "PYTHONUNBUFFERED": "1", **(extra or {})}


def start_cli(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, **popen: Any
) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", MAIN, *args], cwd=cwd, env=cli_env(env), text=True, **popen)


def finish(process: subprocess.Popen[str], timeout: float = 30) -> int:
    """The exit status once ``process`` exits; killed if it has not within ``timeout`` seconds, so
    a failed test never leaves a server or worker behind. Closes the pipes the test opened."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
    return process.returncode


def run_cli(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = TIMEOUT_S,
) -> Done:
    done = subprocess.run(
        [sys.executable, "-c", MAIN, *args],
        cwd=cwd,
        env=cli_env(env),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Done(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(done: Done, *needles: str, status: int | None = None) -> str:
    """The one stderr line of a failed command, checked to hold every needle; returns it."""
    assert done.returncode != 0, f"exit status 0: {done.stdout!r} {done.stderr!r}"
    if status is not None:
        assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{done.stderr}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]
