"""An absent PostgreSQL or Redis skips its tests with one clear line, or fails the run in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLOSED = "postgresql://postgres@127.0.0.1:1/test"  # nothing listens on port 1


def _run_pg_conformance(require: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KEEPSTATE_TEST_POSTGRES": CLOSED, "KEEPSTATE_REQUIRE_SERVICES": require}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rs",
        "tests/conformance/test_scope.py",
        "-k",
        "absent_key and postgres",
    ]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("require", "code", "says"),
    [
        (
            "0",
            0,
            "PostgreSQL is not reachable at postgresql://postgres@127.0.0.1:1/test: skipping the PostgreSQL tests",
        ),
        ("1", 1, "and KEEPSTATE_REQUIRE_SERVICES=1"),
    ],
)
def test_an_absent_service_skips_or_fails(require: str, code: int, says: str) -> None:
    done = _run_pg_conformance(require)
    assert done.returncode == code, done.stdout[-2000:]
    assert says in done.stdout
