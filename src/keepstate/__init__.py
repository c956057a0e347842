"""keepstate: durable state, sessions and exclusive turns for AI agents."""

from .embedded import Store, open
from .errors import (
    Forbidden,
    InterruptedExecution,
    InvalidKey,
    InvalidRequest,
    InvalidValue,
    KeepstateError,
    LeaseLost,
    NoSession,
    NotAList,
    NotFound,
    NotHeld,
    NoUser,
    SessionBusy,
    SessionLocked,
    TooLarge,
    Unauthorized,
    Unavailable,
    VersionConflict,
)
from .scope import Appended, AsyncScope, Scope, Versioned

__version__ = "0.1.0"

__all__ = [
    "Appended",
    "AsyncScope",
    "Forbidden",
    "InterruptedExecution",
    "InvalidKey",
    "InvalidRequest",
    "InvalidValue",
    "KeepstateError",
    "LeaseLost",
    "NoSession",
    "NoUser",
    "NotAList",
    "NotFound",
    "NotHeld",
    "Scope",
    "SessionBusy",
    "SessionLocked",
    "Store",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "VersionConflict",
    "Versioned",
    "open",
]
