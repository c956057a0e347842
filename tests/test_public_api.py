"""The curated public surface: exactly these names, each importable from ``keepstate``."""

from __future__ import annotations

import subprocess
import sys

import keepstate

PUBLIC = {
    # embedded store and scopes
    "open",
    "Store",
    "StoreClosed",
    "Scope",
    "AsyncScope",
    "Versioned",
    "Appended",
    "Items",
    # memory (inv.memory, store.memory)
    "Memory",
    "AsyncMemory",
    "Document",
    "DocumentInfo",
    "Hit",
    # the SDK
    "Client",
    "AsyncClient",
    "Worker",
    "AsyncWorker",
    "Invocation",
    "AsyncInvocation",
    "Key",
    "Run",
    "RunEvent",
    "EventPage",
    "Session",
    # errors
    "KeepstateError",
    "InvalidKey",
    "InvalidValue",
    "InvalidRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "VersionConflict",
    "NoEmbedder",
    "NotAList",
    "NotAnInteger",
    "NoSession",
    "NoUser",
    "SessionBusy",
    "NotHeld",
    "TooLarge",
    "Unavailable",
    "LeaseLost",
    "SessionLocked",
    "InterruptedExecution",
    "IdempotencyInFlight",
    "IdempotencyMismatch",
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


def test_memory_types_are_what_the_store_gives() -> None:
    store = keepstate.open("memory://")
    try:
        memory = store.memory("notes-agent", user="u1")
        assert isinstance(memory, keepstate.Memory)
        memory.write("users/{user}/prefs", "Prefers email\nShips to Lyon.", {"source": "chat"})
        document = memory.read("users/{user}/prefs")
        assert isinstance(document, keepstate.Document) and document.path == "users/u1/prefs"
        listed = list(memory.list("users/"))
        assert [type(info) for info in listed] == [keepstate.DocumentInfo]
        hits = memory.search("email")
        assert [type(hit) for hit in hits] == [keepstate.Hit] and hits[0].path == "users/u1/prefs"
    finally:
        store.close()


def test_the_sdk_and_the_embedded_store_load_none_of_the_servers_modules() -> None:
    """``import keepstate.client`` (and ``keepstate``, ``keepstate.testing``) brings the SDK and the
    embedded store, never the server's rules or routes: those modules, Starlette and uvicorn stay
    unloaded."""
    probe = (
        "import sys, keepstate.client, keepstate, keepstate.testing; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith("
        "('keepstate.platform', 'keepstate.server', 'starlette', 'uvicorn')))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.split() == [], f"importing the SDK loaded {done.stdout.strip()}"
