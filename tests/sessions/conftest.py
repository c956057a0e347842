"""Session-store fixtures (the backends themselves come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sessions_support import Proxy


@pytest.fixture
async def proxies() -> AsyncIterator[list[Proxy]]:
    """Proxies a test starts; all cut afterwards."""
    started: list[Proxy] = []
    yield started
    for proxy in started:
        await proxy.cut()
