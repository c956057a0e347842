"""Without Debian's chromium the browser tests skip with one clear line, or fail the run in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run_browser_test(require: str, empty_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": str(empty_path), "KEEPSTATE_REQUIRE_SERVICES": require}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rs",
        "tests/console/test_console_browser.py",
        "-k",
        "sign_in_refuses",
    ]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("require", "code", "says"),
    [
        ("0", 0, "chromium is not installed (apt-get install chromium): skipping the console's browser tests"),
        ("1", 1, "and KEEPSTATE_REQUIRE_SERVICES=1"),
    ],
)
def test_an_absent_chromium_skips_or_fails(require: str, code: int, says: str, tmp_path: Path) -> None:
    done = _run_browser_test(require, tmp_path)
    assert done.returncode == code, done.stdout[-2000:]
    assert says in done.stdout
