"""Environments, keys, sessions, runs and invocations: the rules of the API, over a store's facets.

``open_platform(url)`` opens the ``Database`` of ``url`` and its state and platform facets: on SQLite
one file with one writer thread, on PostgreSQL one pool, in ``memory://NAME`` one space.
"""

from __future__ import annotations

from ..stores import open_database
from .invocations import Invocations
from .service import Platform
from .state import StateApi


async def open_platform(url: str, lease_seconds: float = 30.0) -> Platform:
    """A ``Platform`` over the store at ``url``; close it with ``aclose()``. InvalidRequest for a store
    without platform records (Redis), Unavailable when the store cannot be reached."""
    database = open_database(url)
    try:
        database.capabilities.require("platform", url)
        platform = Platform(database, await database.platform(), await database.state(), lease_seconds)
    except BaseException:
        await database.aclose()
        raise
    return platform


__all__ = ["Invocations", "Platform", "StateApi", "open_platform"]
