"""Every error keepstate raises, one class per stable code.

The server writes these as ``{"error": code, "message": ..., **details}`` with ``status``;
the SDK reads that body back into the same class, so code that handles a ``VersionConflict``
does not care whether it talked to an embedded store or a server.

    KeepstateError
    ├── InvalidKey (400 invalid_key)          ├── VersionConflict (409 version_conflict)
    ├── InvalidValue (400 invalid_value)      ├── NotAList (409 not_a_list)
    ├── InvalidRequest (400 invalid_request)  ├── NotAnInteger (409 not_an_integer)
    ├── Unauthorized (401 unauthorized)       ├── NoSession (409 no_session)
    ├── Forbidden (403 forbidden)             ├── NoUser (409 no_user)
    ├── NotFound (404 not_found)              ├── SessionBusy (409 session_busy)
    ├── TooLarge (413 too_large)              ├── NotHeld (409 not_held)
    ├── Unavailable (503 unavailable)         ├── LeaseLost (409 lease_lost)
    ├── SessionLocked (409 session_locked)    ├── InterruptedExecution (409 interrupted_execution)
    ├── StoreClosed (503 store_closed)        ├── NoEmbedder (409 no_embedder)
    └── IdempotencyMismatch (422 ...)         └── IdempotencyInFlight (409 idempotency_in_flight)

Driver exceptions (sqlite3, psycopg, redis) are translated at the backend boundary and
never reach a caller.
"""

from __future__ import annotations

from typing import Any, ClassVar


class KeepstateError(Exception):
    """Root of every keepstate error: a stable ``code``, an HTTP ``status`` and details."""

    code: ClassVar[str] = "internal"
    status: ClassVar[int] = 500

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message or self.code)
        self.message = message or self.code
        self.details = details
        for name, value in details.items():
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """The wire form: ``{"error", "message", ...details}``."""
        return {"error": self.code, "message": self.message, **self.details}


class InvalidKey(KeepstateError):
    code, status = "invalid_key", 400


class InvalidValue(KeepstateError):
    """A value keepstate refuses to store; ``path`` points at the first bad place."""

    code, status = "invalid_value", 400
    path: str

    def __init__(self, message: str = "", path: str = "$", **details: Any) -> None:
        super().__init__(message, path=path, **details)


class InvalidRequest(KeepstateError):
    code, status = "invalid_request", 400


class Unauthorized(KeepstateError):
    code, status = "unauthorized", 401


class Forbidden(KeepstateError):
    code, status = "forbidden", 403


class NotFound(KeepstateError):
    code, status = "not_found", 404


class VersionConflict(KeepstateError):
    """An ``if_version`` did not match; ``current_version`` is 0 when the key is absent. A batch's
    conflict also has ``conflicts``: every write whose ``if_version`` failed, each an ``index``,
    ``scope``, ``key`` and ``current_version``."""

    code, status = "version_conflict", 409
    current_version: int
    conflicts: list[dict[str, Any]]

    def __init__(self, message: str = "", current_version: int = 0, **details: Any) -> None:
        super().__init__(
            message or f"version conflict, current version is {current_version}",
            current_version=current_version,
            **details,
        )


class NotAList(KeepstateError):
    code, status = "not_a_list", 409


class NoSession(KeepstateError):
    code, status = "no_session", 409


class NoUser(KeepstateError):
    code, status = "no_user", 409


class NoEmbedder(KeepstateError):
    """A search by meaning (``semantic``, ``hybrid``) in a memory that has no embedder configured."""

    code, status = "no_embedder", 409


class SessionBusy(KeepstateError):
    code, status = "session_busy", 409


class NotHeld(KeepstateError):
    code, status = "not_held", 409


class NotAnInteger(KeepstateError):
    """``incr`` on a value that is not an integer."""

    code, status = "not_an_integer", 409


class LeaseLost(KeepstateError):
    """A session lease was lost or a fenced write found a newer token: nothing was written."""

    code, status = "lease_lost", 409


class SessionLocked(KeepstateError):
    """Waiting for a session's lease took longer than the wait timeout."""

    code, status = "session_locked", 409


class InterruptedExecution(KeepstateError):
    """A session was left mid-effect; its outcome is uncertain and must be reconciled."""

    code, status = "interrupted_execution", 409
    effect: Any


class IdempotencyInFlight(KeepstateError):
    """A write repeated with its ``Idempotency-Key`` while the first is still being applied, for longer
    than a repeat waits for it (10 s): nothing was written by the repeat; try again later."""

    code, status = "idempotency_in_flight", 409


class IdempotencyMismatch(KeepstateError):
    """An ``Idempotency-Key`` used again with another route or body: nothing was written. A key names
    one write; a new write needs a new key."""

    code, status = "idempotency_mismatch", 422


class TooLarge(KeepstateError):
    code, status = "too_large", 413


class Unavailable(KeepstateError):
    """The store cannot be reached. Operational: retry later, never replay an effect."""

    code, status = "unavailable", 503
    retry_after: int

    def __init__(self, message: str = "", retry_after: int = 1, **details: Any) -> None:
        super().__init__(message or "store unavailable", retry_after=retry_after, **details)


class StoreClosed(KeepstateError, RuntimeError):
    """A store, session store, harness store, adapter or client used after its ``close()``/``aclose()``
    (or its ``with`` block) ended it. Not an outage: nothing will answer on this object again; open
    a new one. Never retried by keepstate. Also a ``RuntimeError``, as Python's own closed objects
    raise and as the frameworks' sessions do (code catching that keeps working)."""

    code, status = "store_closed", 503

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message or "this store is closed: open it again to use it", **details)


ERRORS: dict[str, type[KeepstateError]] = {
    cls.code: cls
    for cls in (
        InvalidKey,
        InvalidValue,
        InvalidRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        VersionConflict,
        IdempotencyInFlight,
        IdempotencyMismatch,
        NotAList,
        NoSession,
        NoUser,
        NoEmbedder,
        SessionBusy,
        NotHeld,
        NotAnInteger,
        LeaseLost,
        SessionLocked,
        InterruptedExecution,
        TooLarge,
        Unavailable,
        StoreClosed,
    )
}


def from_wire(status: int, body: Any) -> KeepstateError:
    """Rebuild the exception a server sent; unknown shapes become a plain KeepstateError."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        details = {k: v for k, v in body.items() if k not in ("error", "message")}
        message = str(body.get("message") or body["error"])
        cls = ERRORS.get(body["error"])
        if cls is not None:
            return cls(message, **details)
        error = KeepstateError(message, **details)
    else:
        error = KeepstateError(f"HTTP {status}: {str(body)[:200]}")
    error.status = status  # type: ignore[misc]
    return error
