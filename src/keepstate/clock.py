"""The one clock keepstate reads: wall-clock milliseconds since the epoch.

Every stored time (``created_at``, leases, expiry) is one of these integers, as the HTTP API's
timestamps are, so records move between stores and processes unchanged.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000
