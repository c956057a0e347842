"""keepstate: durable state, sessions and exclusive turns for AI agents."""

from .client import AsyncClient, AsyncInvocation, AsyncWorker, Client, Invocation, Key, Run, Session, Worker
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
    "AsyncClient",
    "AsyncInvocation",
    "AsyncScope",
    "AsyncWorker",
    "Client",
    "Forbidden",
    "InterruptedExecution",
    "InvalidKey",
    "InvalidRequest",
    "InvalidValue",
    "Invocation",
    "KeepstateError",
    "Key",
    "LeaseLost",
    "NoSession",
    "NoUser",
    "NotAList",
    "NotFound",
    "NotHeld",
    "Run",
    "Scope",
    "Session",
    "SessionBusy",
    "SessionLocked",
    "Store",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "VersionConflict",
    "Versioned",
    "Worker",
    "open",
]
