"""``keepstate.open(url)``: state scopes and agents' memory straight on a store, no server, for
one-process apps and tests.

``StoreOps`` is the ``ScopeOps`` of one scope on a store's sync state facet: it checks and encodes
what goes in, decodes what comes out, and nothing else (the rules are the facet's and ``Scope``'s).
Every write comes as one ``ops.Op`` to ``write``, made the facet's own call for it by ``writes``.

``Store.register_session`` makes a session the app keeps state in known to the platform records, so
``keepstate serve``'s console lists it. The platform facet is async only; the sync call runs it on
the store's own private loop thread (``faces.EventLoopThread``, made on first use), which works the
same with no event loop in the calling thread and from inside one.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from . import once, values, writes
from .batch import Planned
from .clock import now_ms
from .embedders import Embedder, load_embedder
from .errors import InvalidRequest, KeepstateError, StoreClosed, VersionConflict
from .memory import Memory, StoreMemoryOps
from .memory_rules import View, space_of
from .ops import Op
from .per_loop import per_loop_databases
from .scope import AsyncScope, Items, Page, Scope, Versioned, scope_namespace
from .stores import forks, open_database
from .stores.base import FACET_HINTS, Database, StateFacet, SyncDocumentsFacet, SyncStateFacet, redact
from .stores.faces import EventLoopThread
from .stores.records import BatchOp, ListPage, StoredSession
from .values import metadata_data, name_field

T = TypeVar("T")

UNOWNED = ""
"""The owner of a session registered without one: no key's id, so only the admins of its environment
see it (the platform's visibility rules: owners and admins)."""


class StoreOps:
    """``ScopeOps`` straight on a store's sync state facet. It holds its ``Store``, so a scope of a
    store opened in passing keeps the store (and its connections) alive for as long as it is used."""

    def __init__(self, store: Store, ns: str) -> None:
        self.store = store
        self.ns = ns

    @property
    def backend(self) -> SyncStateFacet:
        return self.store.state

    def get_versioned(self, key: str) -> Versioned:
        entry = self.backend.get(self.ns, values.check_key(key))
        return Versioned(None, 0) if entry is None else Versioned(values.decode(entry.data), entry.version)

    def expires_at(self, key: str) -> int | None:
        entry = self.backend.get(self.ns, values.check_key(key))
        return None if entry is None else entry.expires_at

    def write(self, op: Op[T]) -> T:
        if op.idempotency_key is not None:
            return self.store.write_once_sync(self.ns, op)
        answer = writes.facet_write(self.backend, self.ns, op)  # an unknown kind is refused here
        result: T = writes.ANSWERS[op.kind](answer)
        return result

    def keys_page(self, prefix: str, after: str, limit: int) -> Page:
        page = self.backend.keys(self.ns, prefix, after, limit)
        return page, (page[-1][0] if len(page) == limit else None)

    def tail(self, key: str, n: int) -> Items:
        return _items(self.backend.tail(self.ns, values.check_key(key), n))

    def items(self, key: str, start: int, limit: int) -> Items:
        return _items(self.backend.items(self.ns, values.check_key(key), start, limit))

    def batch(self, planned: Sequence[Planned]) -> list[Any]:
        """One facet batch of every planned write; each target must be a scope of this same store."""
        ops = _facet_ops(planned, lambda target: isinstance(target, StoreOps) and target.store is self.store)
        try:
            answers = self.backend.batch(ops)
        except VersionConflict as error:
            raise writes.scoped_conflicts(error) from None
        return _answers(planned, answers)


class AsyncStoreOps:
    """``AsyncScopeOps`` straight on a store's async state facet (``Store.ascope``): the same
    checks, encoding and answers as ``StoreOps``, awaited, on the facet of the running loop."""

    def __init__(self, store: Store, ns: str) -> None:
        self.store = store
        self.ns = ns

    async def get_versioned(self, key: str) -> Versioned:
        entry = await (await self.store.async_state()).get(self.ns, values.check_key(key))
        return Versioned(None, 0) if entry is None else Versioned(values.decode(entry.data), entry.version)

    async def expires_at(self, key: str) -> int | None:
        entry = await (await self.store.async_state()).get(self.ns, values.check_key(key))
        return None if entry is None else entry.expires_at

    async def write(self, op: Op[T]) -> T:
        if op.idempotency_key is not None:
            return await self.store.write_once(self.ns, op)
        facet = await self.store.async_state()
        answer = await writes.facet_write(facet, self.ns, op)  # an unknown kind is refused here
        result: T = writes.ANSWERS[op.kind](answer)
        return result

    async def keys_page(self, prefix: str, after: str, limit: int) -> Page:
        page = await (await self.store.async_state()).keys(self.ns, prefix, after, limit)
        return page, (page[-1][0] if len(page) == limit else None)

    async def tail(self, key: str, n: int) -> Items:
        return _items(await (await self.store.async_state()).tail(self.ns, values.check_key(key), n))

    async def items(self, key: str, start: int, limit: int) -> Items:
        return _items(await (await self.store.async_state()).items(self.ns, values.check_key(key), start, limit))

    async def batch(self, planned: Sequence[Planned]) -> list[Any]:
        """One facet batch of every planned write; each target must be an async scope of this same store."""
        ops = _facet_ops(planned, lambda target: isinstance(target, AsyncStoreOps) and target.store is self.store)
        try:
            answers = await (await self.store.async_state()).batch(ops)
        except VersionConflict as error:
            raise writes.scoped_conflicts(error) from None
        return _answers(planned, answers)


def _facet_ops(planned: Sequence[Planned], ours: Callable[[object], bool]) -> list[BatchOp]:
    """The facet's batch ops of ``planned``; a target ``ours`` refuses is an error at its index."""
    writes.check_batch_size(planned)
    ops = []
    for index, plan in enumerate(planned):
        if not ours(plan.target):
            raise InvalidRequest("a batch writes to scopes of one store", index=index)
        try:
            ops.append(writes.batch_op(plan.op, plan.target.ns))
        except KeepstateError as error:
            raise type(error)(error.message, **{**error.details, "index": index}) from None
    return ops


def _answers(planned: Sequence[Planned], answers: Sequence[Any]) -> list[Any]:
    return [writes.ANSWERS[plan.op.kind](answer) for plan, answer in zip(planned, answers, strict=True)]


def _items(page: ListPage | None) -> Items:
    if page is None:
        return Items([], 0, 0)
    return Items([values.decode(item) for item in page.items], page.version, page.length)


class Store:
    """An opened store. ``scope(kind, agent=..., id=...)`` gives a ``Scope``, ``ascope(...)`` the same
    scope as an ``AsyncScope`` for async code (any event loop); ``register_session`` makes a session
    the app keeps state in known to the console; close when done.

    Lifetime: what the store hands out (scopes, batches, memory) holds the store, so a store opened
    in passing (``keepstate.open(url).scope(...)``) lives as long as they are used, and its
    connections end when the last of them is gone or at ``close()`` / the ``with`` block's end.
    After that every call raises ``StoreClosed``. A forked child uses the store with connections of
    its own (``stores.forks``); a store pickled to another process (``spawn``) opens its URL there.

    A store whose async connections belong to one event loop (PostgreSQL's pool, Redis's client:
    ``Database.loop_bound``) opens one more Database of the same URL for each loop that uses it,
    closed by that loop's ``aclose()`` or, forgotten, when the loop shuts down.
    """

    def __init__(self, database: Database, embedder: Embedder | None = None) -> None:
        self.database = database
        self.url = database.url
        self.embedder = embedder
        """What embeds its agents' memory for search by meaning (``open(url, embedder=...)``), or None."""
        self._closed = False
        self._fork = forks.generation()
        self._loops = per_loop_databases(database)
        self._lock = threading.Lock()
        self._portal: EventLoopThread | None = None
        """The loop thread of the sync face's platform calls, made by the first one."""
        self._portal_end: weakref.finalize[Any, Any] | None = None
        forks.forget_in_child(self, Store._forget)
        database.sync_state()  # open now: an unreachable store fails here, and a file's schema migrates

    @property
    def state(self) -> SyncStateFacet:
        """The store's sync state facet; ``StoreClosed`` once the store is closed."""
        self._check()
        return self.database.sync_state()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed(f"the store {redact(self.url)} is closed: open it again to use it")
        if self._fork != forks.generation() and not self.database.capabilities.shared:
            raise InvalidRequest(
                f"the store {redact(self.url)} lives in the process that opened it, not in a forked child: "
                f"{FACET_HINTS['shared']}"
            )

    def scope(self, kind: str, agent: str, id: str | None = None, env: str = "default") -> Scope:
        """The ``run``/``session``/``user`` scope of ``id``, or the ``agent`` scope (no id), of one agent."""
        return Scope(StoreOps(self, scope_namespace(kind, agent, id, env)))

    def ascope(self, kind: str, agent: str, id: str | None = None, env: str = "default") -> AsyncScope:
        """``scope(...)`` for async code: the same scope, on the store's async face."""
        return AsyncScope(AsyncStoreOps(self, scope_namespace(kind, agent, id, env)))

    def register_session(
        self,
        session_id: str,
        agent: str,
        *,
        user: str | None = None,
        metadata: dict[str, Any] | None = None,
        owner: str | None = None,
        env: str = "default",
    ) -> bool:
        """Make the session ``session_id`` known to the platform, with ``agent`` keeping its state in it.

        The session's ``scope("session", agent=agent, id=session_id, env=env)`` is what this app writes;
        ``keepstate serve``'s console lists sessions only from the platform's records and shows the
        session-scope state of their agents: of their runs, and of the agents registered here. Call it
        before the first write (again is harmless): it creates the session unless it exists — an
        existing one keeps its owner, user and metadata — and records the agent, in one atomic step.
        Deleting the session (``DELETE /v0/sessions/{id}``, the console) then drops that agent's
        session-scope state too, so the id created again later starts empty.

        ``user``, ``metadata`` and the names are checked as ``POST /v0/sessions`` checks them
        (``InvalidRequest``, ``InvalidValue``, ``TooLarge``). ``owner``: the id of a key that may see
        and use the session as its owner; ``None`` (no owner) leaves it to the admins of ``env``.

        True when recorded. A store without platform records (``redis://``) has nowhere to keep it,
        and ``keepstate serve`` (the console) needs a SQLite or PostgreSQL store anyway: there this
        checks its arguments, writes nothing and answers False, so one app runs unchanged on every
        store. Works with no event loop running and from inside one (on a private loop thread).
        """
        session = _registration(session_id, agent, user, metadata, owner, env)
        self._check()
        if not self.database.capabilities.platform:
            return False
        self._portal_thread().run(self._register(session, agent))
        return True

    async def aregister_session(
        self,
        session_id: str,
        agent: str,
        *,
        user: str | None = None,
        metadata: dict[str, Any] | None = None,
        owner: str | None = None,
        env: str = "default",
    ) -> bool:
        """``register_session`` for async code, on the running loop."""
        session = _registration(session_id, agent, user, metadata, owner, env)
        self._check()
        if not self.database.capabilities.platform:
            return False
        await self._register(session, agent)
        return True

    async def _register(self, session: StoredSession, agent: str) -> None:
        platform = await (await self._loop_database()).platform()
        await platform.register_session(session, agent)

    def _portal_thread(self) -> EventLoopThread:
        with self._lock:
            self._check()
            if self._portal is None:
                self._portal = EventLoopThread()
                self._portal_end = weakref.finalize(self, self._portal.stop)
            return self._portal

    def write_once_sync(self, ns: str, op: Op[T]) -> T:
        """A write with an ``idempotency_key`` from a sync scope: on this thread where the store can, else
        on the store's loop thread (the atomic step is async there)."""
        self._check()
        if self.database.remembers_sync:
            return once.write_once_sync(self.database, ns, op)
        return self._portal_thread().run(self.write_once(ns, op))

    async def write_once(self, ns: str, op: Op[T]) -> T:
        """A write with an ``idempotency_key``, on the running loop (``once.py``)."""
        return await once.write_once(await self._loop_database(), ns, op)

    async def async_state(self) -> StateFacet:
        """The async state facet for the running event loop; ``StoreClosed`` once the store is closed."""
        return await (await self._loop_database()).state()

    async def _loop_database(self) -> Database:
        """The Database of the running event loop: the store's own, or one per loop for a loop-bound store."""
        self._check()
        return await self._loops.current()

    async def aclose(self) -> None:
        """Close the running loop's async connections (``close()`` still closes the store)."""
        await self._loops.aclose_current()

    def memory(self, agent: str, user: str | None = None, env: str = "default") -> Memory:
        """``agent``'s memory as a run of end user ``user`` sees it (its folder ``users/{user}/`` and
        everything outside ``users/``), or as a run without one. Needs SQLite, PostgreSQL or memory://."""
        view = View(space_of(env, agent), None if user is None else values.check_key(user, "user"))
        return Memory(StoreMemoryOps(self.documents, view, self.embedder))

    def documents(self) -> SyncDocumentsFacet:
        """The store's sync documents facet (memory); ``StoreClosed`` once the store is closed."""
        self._check()
        return self.database.sync_documents()

    def close(self) -> None:
        """Close the store: every loop's connections, the sync faces' loop thread and the store's files
        or pools. Again is a no-op; anything the store handed out raises ``StoreClosed`` from now on."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            end, self._portal, self._portal_end = self._portal_end, None, None
        try:
            self._loops.close()
        finally:
            if end is not None:
                end()
            self.database.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def __reduce__(self) -> tuple[Callable[..., Store], tuple[str, Embedder | None]]:
        """Pickled (``multiprocessing``'s spawn), a store is its URL: the other process opens its own."""
        self._check()
        if not self.database.capabilities.shared:
            raise InvalidRequest(f"the store {redact(self.url)} cannot go to another process: {FACET_HINTS['shared']}")
        return open, (self.url, self.embedder)

    def _forget(self) -> None:
        """In a forked child: the parent's loop thread and per-loop connections are not ours."""
        if self._portal is not None:
            forks.abandon_loop(self._portal.loop)
        if self._portal_end is not None:
            self._portal_end.detach()
        self._portal = self._portal_end = None
        self._lock = threading.Lock()


def _registration(
    session_id: str, agent: str, user: str | None, metadata: dict[str, Any] | None, owner: str | None, env: str
) -> StoredSession:
    """The session ``register_session`` records, its arguments checked by the platform's own checks."""
    names = {"session_id": session_id, "agent": agent, "user": user, "owner": owner, "env": env}
    for name in names:
        name_field(names, name, required=name in ("session_id", "agent", "env"))
    data = metadata_data({} if metadata is None else metadata)
    return StoredSession(env, session_id, UNOWNED if owner is None else owner, user, data, now_ms())


def open(url: str, embedder: str | Embedder | Callable[[list[str]], Any] | None = None) -> Store:
    """Open the store at ``url`` (``memory://``, ``sqlite:///file.db``, ``postgresql://…``, ``redis://…``).

    ``embedder`` makes its memory searchable by meaning: ``"local"`` (``keepstate[embed]``),
    ``"module:callable"``, or a callable taking a list of texts and returning one vector per text."""
    found = load_embedder(embedder)
    database = open_database(url)
    try:
        return Store(database, found)
    except BaseException:
        database.close()
        raise
