"""Where the last page of a run's event log starts (``console.run_events.tail_start``), over a log that
counts its reads: the right page for any length, in a few one-event reads."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace
from typing import cast

import pytest

from keepstate.platform.run_events import RunEvents
from keepstate.server.console.run_events import EVENTS_PAGE, tail_start


class Log:
    """A run's log of ``length`` events as ``RunEventLog.read`` reads it (seq 1 … length), counting reads."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.reads = 0

    async def read(self, run_id: str, after: int, limit: int) -> list[int]:
        self.reads += 1
        return list(range(after + 1, min(after + limit, self.length) + 1))


@pytest.mark.parametrize("length", [101, 150, 200, 201, 202, 399, 400, 401, 1234, 10_004])
def test_the_last_page_of_a_log_is_found_in_few_reads(length: int) -> None:
    log = Log(length)
    events = cast(RunEvents, SimpleNamespace(log=log))
    assert asyncio.run(tail_start(events, "run")) == length - EVENTS_PAGE
    assert log.reads <= 2 * math.ceil(math.log2(length))
