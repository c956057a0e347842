"""Session store with transactions, leases and fencing (seed 003, the session store spec).

``open_session_store(url)`` opens the store's ``Database`` and wraps its lease facet in the one
``SessionStore`` that implements ``transact``, renewal and fencing for every backend; on a server's
URL the lease facet is its session-store API (``client/session_store.py``).
"""

from __future__ import annotations

from ..errors import InterruptedExecution, LeaseLost, SessionLocked, Unavailable
from ..stores import open_database
from .base import Leases, LeaseSource, SessionStore
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


def open_session_store(
    url: str,
    lease_seconds: float = 15,
    wait_timeout: float = 30,
    *,
    key: str | None = None,
    space: str | None = None,
) -> SessionStore:
    """A session store on ``memory://``, ``sqlite:///``, ``postgresql://`` or ``redis://``, or the one
    a keepstate server serves at ``http(s)://host:port``: the sessions of ``space`` (default
    ``default``) in the environment of ``key`` (an admin or member key; default ``KEEPSTATE_KEY``).

    Network stores connect on first use; an unreachable store raises ``Unavailable`` then.
    """
    leases: LeaseSource
    if url.startswith(("http://", "https://")):
        from ..client._core import Config
        from ..client.session_store import HttpLeases

        leases = HttpLeases(Config.build(url, key), space or "default")
    elif key is not None or space is not None:
        raise ValueError("key and space name a server's session store: use them with an http(s):// URL")
    else:
        leases = open_leases(url)
    return SessionStore(leases, lease_seconds=lease_seconds, wait_timeout=wait_timeout)


__all__ = [
    "SCHEMA_VERSION",
    "InterruptedExecution",
    "LeaseLost",
    "LeaseSource",
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
