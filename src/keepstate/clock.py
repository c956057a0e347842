"""The one clock keepstate reads: wall-clock milliseconds since the epoch.

Every stored time (``created_at``, leases, expiry) is one of these integers, as the HTTP API's
timestamps are, so records move between stores and processes unchanged.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


DAY_MS = 86_400_000
MAX_AGE_DAYS = 36_500
"""The largest age in days keepstate takes (a retention, a purge's ``--older-than``): a century, so a
cutoff computed from it stays a time of the store's, never past what a stored integer holds."""


def days_ago(days: float, now: int) -> int:
    """The time ``days`` before ``now``; ValueError unless ``days`` is from 0 to ``MAX_AGE_DAYS``."""
    if not 0 <= days <= MAX_AGE_DAYS:  # NaN fails the comparison, infinity the bound
        raise ValueError(f"an age must be a number of days from 0 to {MAX_AGE_DAYS:,}, got {days!r}")
    return now - round(days * DAY_MS)
