"""Session store with transactions, leases and fencing (seed 003, ``spec/session-store.md``).

``open_session_store(url)`` picks a backend by URL scheme (imported lazily, so a missing driver
only matters when its scheme is used) and wraps it in the one ``SessionStore`` that implements
``transact``, renewal and fencing for all of them.
"""

from __future__ import annotations

import importlib

from ..errors import InterruptedExecution, LeaseLost, SessionLocked, Unavailable
from ..stores import scheme_of
from .base import LeaseBackend, SessionStore, Stored
from .manager import ManagedSession, SessionManager
from .state import SCHEMA_VERSION, SessionState
from .tokens import TokenStore, open_token_store

_BACKENDS = {
    "memory": ("keepstate.sessions.memory", "MemoryBackend"),
    "sqlite": ("keepstate.sessions.sqlite", "SqliteBackend"),
    "postgresql": ("keepstate.sessions.postgres", "PostgresBackend"),
    "postgres": ("keepstate.sessions.postgres", "PostgresBackend"),
    "redis": ("keepstate.sessions.redis", "RedisBackend"),
}


def open_backend(url: str, space: str = "sessions") -> LeaseBackend:
    """The lease backend for ``url``; ``space`` keeps session state and tokens apart."""
    module, name = _BACKENDS[scheme_of(url)]
    backend: LeaseBackend = getattr(importlib.import_module(module), name)(url, space)
    return backend


def open_session_store(url: str, lease_seconds: float = 15, wait_timeout: float = 30) -> SessionStore:
    """A session store on ``memory://``, ``sqlite:///``, ``postgresql://`` or ``redis://``.

    Network backends connect on first use; an unreachable store raises ``Unavailable`` then.
    """
    return SessionStore(open_backend(url), lease_seconds=lease_seconds, wait_timeout=wait_timeout)


__all__ = [
    "SCHEMA_VERSION",
    "InterruptedExecution",
    "LeaseBackend",
    "LeaseLost",
    "ManagedSession",
    "SessionLocked",
    "SessionManager",
    "SessionState",
    "SessionStore",
    "Stored",
    "TokenStore",
    "Unavailable",
    "open_backend",
    "open_session_store",
    "open_token_store",
]
