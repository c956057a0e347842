"""Fixtures of the platform conformance suites: a fresh platform of the parametrised store, its facet and Database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from keepstate.platform import Platform, open_platform
from keepstate.stores.base import Database, PlatformFacet


@pytest.fixture
async def platform(backend_url: str) -> AsyncIterator[Platform]:
    opened = await open_platform(backend_url)
    yield opened
    await opened.aclose()


@pytest.fixture
def repo(platform: Platform) -> PlatformFacet:
    return platform.repo


@pytest.fixture
def database(platform: Platform) -> Database:
    return platform.database
