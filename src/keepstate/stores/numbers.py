"""The integers of ``incr``: what counts as one in stored JSON, and signed 64-bit sums.

Stored values are canonical JSON (orjson's), so an integer is exactly an optional ``-`` and digits;
``1.0``, ``"1"`` or ``true`` are not integers. Backends that add in Python (memory, SQLite) use these;
PostgreSQL and Redis check the same rules in their own statements.
"""

from __future__ import annotations

import re

from ..errors import InvalidValue, NotAnInteger

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
_INTEGER = re.compile(rb"-?(0|[1-9][0-9]*)")


def integer_of(data: bytes) -> int:
    """The integer a stored value holds; NotAnInteger when it holds anything else."""
    if _INTEGER.fullmatch(data) is None:
        raise NotAnInteger("incr needs an integer value, and this key holds something else")
    return int(data)


def add_checked(value: int, by: int) -> int:
    """``value + by``, refused (InvalidValue, path ``$``) outside signed 64-bit."""
    total = value + by
    if not INT_MIN <= total <= INT_MAX:
        raise InvalidValue(f"{value} + {by} is outside signed 64-bit", path="$")
    return total
