"""The curated public surface: exactly these names, each importable from ``keepstate``."""

from __future__ import annotations

import keepstate

PUBLIC = {
    # embedded store and scopes
    "open", "Store", "Scope", "AsyncScope", "Versioned", "Appended", "Items",
    # the SDK
    "Client", "AsyncClient", "Worker", "AsyncWorker", "Invocation", "AsyncInvocation", "Key", "Run", "Session",
    # errors
    "KeepstateError", "InvalidKey", "InvalidValue", "InvalidRequest", "Unauthorized", "Forbidden", "NotFound",
    "VersionConflict", "NotAList", "NotAnInteger", "NoSession", "NoUser", "SessionBusy", "NotHeld", "TooLarge",
    "Unavailable", "LeaseLost", "SessionLocked", "InterruptedExecution",
}


def test_all_is_exactly_the_curated_list() -> None:
    assert set(keepstate.__all__) == PUBLIC
    assert len(keepstate.__all__) == len(PUBLIC)
    assert keepstate.__all__ == sorted(keepstate.__all__)


def test_every_public_name_resolves() -> None:
    for name in PUBLIC:
        assert getattr(keepstate, name) is not None, name


def test_session_and_harness_stores_are_their_own_modules() -> None:
    from keepstate.harness import open_harness_store
    from keepstate.sessions import (
        InterruptedExecution,
        LeaseLost,
        SessionLocked,
        SessionManager,
        SessionState,
        open_session_store,
        open_token_store,
    )

    assert callable(open_harness_store) and callable(open_session_store) and callable(open_token_store)
    assert SessionState.__name__ == "SessionState" and SessionManager.__name__ == "SessionManager"
    assert LeaseLost is keepstate.LeaseLost and SessionLocked is keepstate.SessionLocked
    assert InterruptedExecution is keepstate.InterruptedExecution
