"""Fixtures of the conformance suites: the parametrised store opened embedded, or a fresh platform of it,
its facet and Database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import keepstate
from keepstate.platform import Platform, open_platform
from keepstate.stores.base import Database, PlatformFacet


@pytest.fixture
def store(backend_url: str) -> Iterator[keepstate.Store]:
    opened = keepstate.open(backend_url)
    yield opened
    opened.close()


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
