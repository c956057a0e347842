"""Environments, keys, sessions, runs and invocations: the rules of the API, over a store.

``open_platform(url)`` opens the state backend of ``url`` and the platform's own records on the
same store: for SQLite on the very same ``SqliteDatabase`` (one writer thread, one group commit
for both), for PostgreSQL on the state backend's pool, for ``memory://`` in this process.
"""

from __future__ import annotations

from ..stores import open_backend, scheme_of
from .invocations import Invocations
from .memory_repo import MemoryRepo
from .repo import PlatformRepo
from .service import Platform
from .state import StateApi


async def open_platform(url: str, lease_seconds: float = 30.0) -> Platform:
    """A ``Platform`` over the store at ``url``; close it with ``aclose()``."""
    scheme = scheme_of(url)
    if scheme == "redis":
        raise ValueError(
            "the server's platform records (keys, sessions, runs) need PostgreSQL or SQLite: use a postgresql:// "
            "or sqlite:/// store URL (Redis is supported for the state store and the session store)"
        )
    backend = await open_backend(url)
    repo: PlatformRepo
    if scheme == "memory":
        repo = MemoryRepo()
    elif scheme in ("postgresql", "postgres"):
        repo = await _postgres_repo(backend, url)
    else:
        from ..stores.sqlite import AsyncSqliteBackend
        from .sqlite_repo import SqliteRepo

        shared = backend.db if isinstance(backend, AsyncSqliteBackend) else None
        repo = SqliteRepo(shared, owns_db=False) if shared is not None else SqliteRepo.from_url(url)
    return Platform(repo, backend, lease_seconds)


async def _postgres_repo(backend: object, url: str) -> PlatformRepo:
    """The platform's records on the state backend's own pool: one pool per server process."""
    from ..stores.postgres import PostgresBackend
    from .postgres_repo import PostgresRepo

    if not isinstance(backend, PostgresBackend):
        return await PostgresRepo.from_url(url)
    try:
        return await PostgresRepo.open(backend.pool)
    except BaseException:
        await backend.aclose()
        raise


__all__ = ["Invocations", "Platform", "StateApi", "open_platform"]
