"""pytest plugin standing in for a loaded machine: ``time.perf_counter`` runs three times as fast,
so every duration a test measures with it reads three times as long (test_upstream_swap.py). Load
it with ``-p`` before the suite's test modules are imported (they may bind ``perf_counter``).
"""

from __future__ import annotations

import time

_real = time.perf_counter
_origin = _real()


def _three_times() -> float:
    return _origin + 3 * (_real() - _origin)


time.perf_counter = _three_times
