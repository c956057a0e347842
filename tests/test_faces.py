"""Every sync/async pair of the package has the same methods with the same parameters.

The scheme (``keepstate.stores.base``): each contract is written once; in-process backends have a
sync core with a thin async face, network backends an async face with the one generic sync portal;
the SDK describes each call once (``client.calls``) and sends it from both faces. What can still
drift is the faces' names and signatures, so this checks every pair: the state facet contract and
each backend's two faces, the scopes and their ops, the SDK's clients, workers and invocations.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from keepstate import AsyncClient, AsyncInvocation, AsyncScope, AsyncWorker, Client, Invocation, Scope, Worker
from keepstate.batch import AsyncBatch, Batch
from keepstate.client import (
    Agents,
    AsyncAgents,
    AsyncCallerState,
    AsyncKeys,
    AsyncRuns,
    AsyncSessions,
    CallerMemory,
    CallerState,
    Keys,
    Runs,
    Sessions,
)
from keepstate.client.invocation import AsyncHttpOps, AsyncState, HttpOps, State
from keepstate.client.memory_calls import AsyncHttpMemoryOps, HttpMemoryOps
from keepstate.embedded import AsyncStoreOps, StoreOps
from keepstate.memory import AsyncMemory, AsyncMemoryOps, InlineAsyncMemoryOps, Memory, MemoryOps
from keepstate.scope import AsyncScopeOps, ScopeOps
from keepstate.stores.base import DocumentsFacet, StateFacet, SyncDocumentsFacet, SyncStateFacet
from keepstate.stores.faces import DocumentsPortal, InlineAsync, InlineAsyncDocuments, Portal
from keepstate.stores.memory.documents import MemoryDocuments
from keepstate.stores.memory.state import MemoryState
from keepstate.stores.postgres.documents import PostgresDocuments
from keepstate.stores.postgres.state import PostgresState
from keepstate.stores.redis.state import RedisState
from keepstate.stores.sqlite.documents import AsyncSqliteDocuments, SqliteDocuments
from keepstate.stores.sqlite.state import AsyncSqliteState, SqliteState
from keepstate.testing import AsyncOps

ASYNC_NAMES = {"close": "aclose", "__enter__": "__aenter__", "__exit__": "__aexit__"}
STATE_METHODS = {name for name in dir(StateFacet) if not name.startswith("_")}
DOCUMENTS_METHODS = {name for name in dir(DocumentsFacet) if not name.startswith("_")}
DOCUMENTS_FACES = (
    SqliteDocuments,
    AsyncSqliteDocuments,
    MemoryDocuments,
    InlineAsyncDocuments,
    DocumentsPortal,
    PostgresDocuments,
)


def _public(cls: type, only: set[str] | None = None) -> dict[str, list[tuple[str, Any]] | None]:
    """Public members (and ``__init__``), each with its parameters' names and defaults."""
    names = {name for name in dir(cls) if not name.startswith("_")} | {"__init__"}
    if only is not None:
        names &= only
    found: dict[str, list[tuple[str, Any]] | None] = {}
    for name in names:
        member = getattr(cls, name)
        found[name] = (
            None
            if not callable(member)
            else [(p.name, p.default) for p in inspect.signature(member).parameters.values()]
        )
    return found


def _same(sync: type, asynchronous: type, only: set[str] | None = None, init: bool = True) -> None:
    sync_members = {ASYNC_NAMES.get(name, name): sig for name, sig in _public(sync, only).items()}
    async_members = _public(asynchronous, only)
    if not init:
        sync_members.pop("__init__", None)
        async_members.pop("__init__", None)
    assert set(sync_members) == set(async_members), sorted(set(sync_members) ^ set(async_members))
    for name, signature in sync_members.items():
        assert signature == async_members[name], name


@pytest.mark.parametrize(
    ("sync", "asynchronous"),
    [
        (Client, AsyncClient),
        (Sessions, AsyncSessions),
        (Runs, AsyncRuns),
        (Keys, AsyncKeys),
        (Agents, AsyncAgents),
        (Worker, AsyncWorker),
        (Invocation, AsyncInvocation),
        (Scope, AsyncScope),
        (State, AsyncState),
        (ScopeOps, AsyncScopeOps),
        (HttpOps, AsyncHttpOps),
        (CallerState, AsyncCallerState),
        (Batch, AsyncBatch),
        (Memory, AsyncMemory),
        (MemoryOps, AsyncMemoryOps),
        (HttpMemoryOps, AsyncHttpMemoryOps),
    ],
)
def test_the_sdk_faces_match(sync: type, asynchronous: type) -> None:
    _same(sync, asynchronous)


def test_both_clients_hand_out_their_own_face_of_the_same_caller_memory() -> None:
    """``client.memory`` is one class for both clients (no twin to drift): it hands out ``Memory`` from
    ``Client`` and ``AsyncMemory`` from ``AsyncClient``, whose faces ``test_the_sdk_faces_match`` compares."""
    import httpx

    sync_client = Client(
        "http://127.0.0.1:8420", "k", transport=httpx.MockTransport(lambda request: httpx.Response(500))
    )
    async_client = AsyncClient(
        "http://127.0.0.1:8420", "k", transport=httpx.MockTransport(lambda request: httpx.Response(500))
    )
    assert isinstance(sync_client.memory, CallerMemory) and isinstance(async_client.memory, CallerMemory)
    for made in (sync_client.memory.agent("chat"), sync_client.memory.user("ada", "chat")):
        assert isinstance(made, Memory)
    for amade in (async_client.memory.agent("chat"), async_client.memory.user("ada", "chat")):
        assert isinstance(amade, AsyncMemory)
    sync_client.close()


@pytest.mark.parametrize(
    ("sync", "asynchronous"),
    [
        (SyncStateFacet, StateFacet),
        (SqliteState, AsyncSqliteState),
        (MemoryState, InlineAsync),
        (Portal, PostgresState),
        (Portal, RedisState),
        (ScopeOps, AsyncOps),
        (StoreOps, AsyncStoreOps),
    ],
)
def test_the_state_facet_faces_match(sync: type, asynchronous: type) -> None:
    """Constructors differ (a connection, a loop thread): the contract's methods must not."""
    _same(sync, asynchronous, STATE_METHODS | set(dir(ScopeOps)), init=False)


def test_every_state_face_implements_the_whole_contract() -> None:
    for face in (SqliteState, AsyncSqliteState, MemoryState, InlineAsync, Portal, PostgresState, RedisState):
        assert set(dir(face)) >= STATE_METHODS, face


@pytest.mark.parametrize(
    ("sync", "asynchronous"),
    [
        (SyncDocumentsFacet, DocumentsFacet),
        (SqliteDocuments, AsyncSqliteDocuments),
        (MemoryDocuments, InlineAsyncDocuments),
        (DocumentsPortal, PostgresDocuments),
        (MemoryOps, InlineAsyncMemoryOps),
    ],
)
def test_the_documents_facet_faces_match(sync: type, asynchronous: type) -> None:
    _same(sync, asynchronous, DOCUMENTS_METHODS | set(dir(MemoryOps)), init=False)


def test_every_documents_face_implements_the_whole_contract() -> None:
    for face in DOCUMENTS_FACES:
        assert set(dir(face)) >= DOCUMENTS_METHODS, face
