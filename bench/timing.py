"""Small timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def ops_per_second(fn: Callable[[int], object], count: int, rounds: int = 3) -> float:
    """Median ops/s over ``rounds`` runs of ``fn(i)`` for i in range(count)."""
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        for index in range(count):
            fn(index)
        rates.append(count / (time.perf_counter() - started))
    return statistics.median(rates)


def paired(
    raw: Callable[[int], object], ours: Callable[[int], object], count: int, rounds: int = 5
) -> tuple[float, float, float]:
    """Raw and ours measured in alternating rounds (so drift hits both alike): the median ops/s of
    each and the median of the per-round ratios."""
    pairs = [(ops_per_second(raw, count, 1), ops_per_second(ours, count, 1)) for _ in range(rounds)]
    return (
        statistics.median(r for r, _ in pairs),
        statistics.median(o for _, o in pairs),
        statistics.median(o / r for r, o in pairs),
    )


def table(header: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    return str(value)
