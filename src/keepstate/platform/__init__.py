"""Environments, keys, sessions, runs and invocations: the rules of the API, over a store's facets.

``open_platform(url)`` opens the ``Database`` of ``url`` and its state and platform facets: on SQLite
one file with one writer thread, on PostgreSQL one pool, in ``memory://NAME`` one space.
"""

from __future__ import annotations

from ..stores import open_database
from .invocations import Invocations
from .service import DEFAULT_QUEUE_TIMEOUT_S, Platform
from .state import StateApi


async def open_platform(
    url: str, lease_seconds: float = 30.0, queue_timeout: float = DEFAULT_QUEUE_TIMEOUT_S
) -> Platform:
    """A ``Platform`` over the store at ``url``; close it with ``aclose()``. InvalidRequest for a store
    without platform records (Redis), Unavailable when the store cannot be reached. ``queue_timeout``:
    the seconds a run started without its own may stay queued."""
    database = open_database(url)
    try:
        database.capabilities.require("platform", url)
        repo, state = await database.platform(), await database.state()
        platform = Platform(database, repo, state, lease_seconds, queue_timeout)
    except BaseException:
        await database.aclose()
        raise
    return platform


__all__ = ["Invocations", "Platform", "StateApi", "open_platform"]
