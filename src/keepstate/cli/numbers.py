"""The types of the command line's numeric options: finite, and within bounds a user could mean.

click's ``FloatRange`` lets ``nan`` through any bounds (every comparison with NaN is false) and
``inf`` through an open end, and ``float`` reads ``1e308``: each then fails far from the option,
as a traceback or an "unexpected" error. Every numeric option of ``keepstate`` is one of these
types instead, so a value outside its range is a usage error naming the option (exit status 2).
"""

from __future__ import annotations

import math
from typing import Any

import click

INT64_MAX = 2**63 - 1


class Finite(click.FloatRange):
    """A number from ``low`` to ``high`` (both finite): NaN and infinities are refused with the range."""

    name = "number"

    def __init__(self, low: float, high: float, low_open: bool = False) -> None:
        super().__init__(low, high, min_open=low_open, clamp=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number in the range {self._describe_range()}.", param, ctx)
        return number


def whole(low: int, high: int = INT64_MAX) -> click.IntRange:
    """A whole number from ``low`` to ``high`` (by default what a signed 64-bit integer holds)."""
    return click.IntRange(low, high)
