"""Fixtures of the harness store suites: a fresh store per test on every backend it runs on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness_support import SMALL_CHUNK

from keepstate.harness import HarnessStore, open_harness_store


@pytest.fixture
def store(backend_url: str) -> Iterator[HarnessStore]:
    with open_harness_store(backend_url, chunk_size=SMALL_CHUNK) as opened:
        yield opened
