"""The booking example end to end: two worker processes, one store, one booking."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sessions_support import SHARED

DEMO = Path(__file__).parents[2] / "examples" / "booking" / "run_demo.py"


@pytest.mark.parametrize("backend_url", SHARED, indirect=True)
def test_booking_demo_books_once_across_two_workers(backend_url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(DEMO), "--store", backend_url, "--confirmations", "8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"bookings": 1, "booked_replies": 1}
    assert done.stdout.count("There is nothing to confirm.") == 7
