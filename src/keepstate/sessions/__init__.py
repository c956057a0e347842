"""Session store with transactions, leases and fencing (seed 003, the session store spec).

``open_session_store(url)`` opens the store's ``Database`` and wraps its lease facet in the one
``SessionStore`` that implements ``transact``, renewal and fencing for every backend.
"""

from __future__ import annotations

from ..errors import InterruptedExecution, LeaseLost, SessionLocked, Unavailable
from ..stores import open_database
from .base import Leases, SessionStore
from .manager import ManagedSession, SessionManager
from .state import SCHEMA_VERSION, SessionState
from .tokens import TokenStore, open_token_store


def open_leases(url: str, space: str = "sessions") -> Leases:
    """The leases of ``space`` in the store at ``url``; spaces keep session state and tokens apart."""
    database = open_database(url)
    try:
        return Leases(database, space)
    except BaseException:
        database.close()
        raise


def open_session_store(url: str, lease_seconds: float = 15, wait_timeout: float = 30) -> SessionStore:
    """A session store on ``memory://``, ``sqlite:///``, ``postgresql://`` or ``redis://``.

    Network stores connect on first use; an unreachable store raises ``Unavailable`` then.
    """
    return SessionStore(open_leases(url), lease_seconds=lease_seconds, wait_timeout=wait_timeout)


__all__ = [
    "SCHEMA_VERSION",
    "InterruptedExecution",
    "LeaseLost",
    "Leases",
    "ManagedSession",
    "SessionLocked",
    "SessionManager",
    "SessionState",
    "SessionStore",
    "TokenStore",
    "Unavailable",
    "open_leases",
    "open_session_store",
    "open_token_store",
]
