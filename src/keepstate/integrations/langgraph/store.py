"""keepstate as LangGraph's long-term store: ``BaseStore``s on any keepstate store URL.

``KeepstateStore(url)`` for sync apps (``setup()``, ``sweep_ttl()`` and the sweeper thread are plain
calls, as on ``SqliteStore``); ``AsyncKeepstateStore(url)`` for async apps (they are awaited, and
its sync calls refuse to run on the event loop's thread, as on ``AsyncSqliteStore`` /
``AsyncPostgresStore``; made inside its loop, it gathers the calls of one loop tick into one
``abatch``, as they do). Both answer ``batch`` and ``abatch``, the async one on keepstate's async
face (on SQLite, concurrent writes share one commit). ``from_store(store)`` shares an open store.

What it keeps, and where (store_layout.py): every item is one key of one keepstate *session* scope
(agent and session ``langgraph-store`` unless told otherwise: not the agent ``langgraph`` of the
checkpointer's threads, so no thread id can meet it), its value an object with
the namespace, key, value, timestamps and TTL, so ``keepstate serve``'s console lists the session
(registered by ``setup()`` or the first write) and shows each item.

What it promises beyond LangGraph's own stores:

- **TTL exact on read.** An item's TTL is keepstate's own expiry on its key: an expired item is
  absent to every get, search and listing the moment it expires, whatever a sweep did. Refresh on
  read (``ttl={"refresh_on_read": True}``, as SqliteStore reads it; ``refresh_ttl=False`` per call
  opts out) moves the expiry forward with a compare-and-set write of the same value, so it never
  revives an item deleted or rewritten meanwhile. ``sweep_ttl()`` only frees space: it turns the
  keepstate store's expired keys (this scope's and any other's) into tombstones and says how many.
- **A put never tears**, also from several processes: each put is one atomic keepstate write of
  the whole item, made with ``if_version`` on the version it read (to keep ``created_at``), retried
  on a conflict. The puts of one ``batch`` are written as keepstate batches of up to 100, each all
  or nothing. Reads of a batch see the store as it was before the batch's puts (as SqliteStore).

A search lists the keys under its prefix and reads only the items this object has not read at
their version (store_cache.py); it filters, orders and pages them in Python (store_query.py).

Search by meaning, with ``index={"dims": D, "embed": E, "fields": [...]}`` as LangGraph's own stores
take it (store_index.py): a put embeds its fields and keeps the vectors in the same write as the item;
a ``query=`` ranks the items by cosine similarity, ``score`` set. Without an index a ``query=`` is
ignored, as SqliteStore ignores it: items are filtered, ordered newest first and paged
(store_query.py), ``score`` None. Values must be JSON (keepstate refuses NaN, non-JSON types, over 1 MiB).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import suppress
from types import TracebackType
from typing import Any, Self

import keepstate
from keepstate.batch import AsyncBatch, Batch
from keepstate.errors import VersionConflict
from keepstate.protocol import MAX_BATCH_OPS
from keepstate.scope import UPDATE_TRIES, Versioned, backoff_seconds

try:
    from langgraph.store.base import (
        NOT_PROVIDED,
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        NotProvided,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        validate_op_namespace,
    )
    from langgraph.store.base.batch import AsyncBatchedBaseStore
except ImportError as error:  # pragma: no cover - the extra is installed in every test run
    raise ImportError("keepstate.integrations.langgraph needs LangGraph: pip install 'keepstate[langgraph]'") from error

from . import store_layout as layout
from . import store_query as query
from .store_cache import VersionCache, copied
from .store_index import Index, best_score, ranked

AGENT = "langgraph-store"
SESSION = "langgraph-store"
SWEEP_BATCH = 1000
DEFAULT_SWEEP_MINUTES = 5.0
logger = logging.getLogger("keepstate.integrations.langgraph")


class _KeepstateBaseStore(BaseStore):
    """``batch``/``abatch`` over one keepstate session scope; the lifecycle calls are the subclasses'."""

    supports_ttl = True

    def __init__(
        self,
        url: str,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        agent: str = AGENT,
        session_id: str = SESSION,
        env: str = "default",
    ) -> None:
        store = keepstate.open(url)
        try:
            self._attach(store, True, ttl, agent, session_id, env, index)
        except BaseException:  # a bad agent or session name: close what was opened for it
            store.close()
            raise

    @classmethod
    def from_store(
        cls,
        store: keepstate.Store,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        agent: str = AGENT,
        session_id: str = SESSION,
        env: str = "default",
    ) -> Self:
        """A LangGraph store on an open keepstate store, which it shares and does not close."""
        self = cls.__new__(cls)
        self._attach(store, False, ttl, agent, session_id, env, index)
        return self

    def _attach(
        self,
        store: keepstate.Store,
        owns: bool,
        ttl: TTLConfig | None,
        agent: str,
        session_id: str,
        env: str,
        index: IndexConfig | None = None,
    ) -> None:
        self.store = store
        self.ttl_config = ttl
        self._index = None if index is None else Index(index)
        self.index_config = None if self._index is None else self._index.config
        self.embeddings = None if self._index is None else self._index.embeddings
        self._owns = owns
        self._session = (session_id, agent, env)
        self._scope = store.scope("session", agent=agent, id=session_id, env=env)
        self._ascope = store.ascope("session", agent=agent, id=session_id, env=env)
        self._registered = False
        self._closed = False
        self._cache = VersionCache()

    def _check_open(self) -> None:
        if self._closed:
            raise keepstate.StoreClosed(f"this {type(self).__name__} is closed: make a new one to use it")

    @property
    def _refreshes(self) -> bool:
        return bool(self.ttl_config and self.ttl_config.get("refresh_on_read"))

    # ------------------------------------------------------------ sync face

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        self._check_open()
        checked = _checked(ops)
        results = [None if isinstance(op, PutOp) else self._read(op) for op in checked]
        puts = _last_wins(checked)
        if puts:
            self._register()
        for chunk in _chunks(puts):
            self._write(chunk)
        return results

    def _read(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        assert isinstance(op, ListNamespacesOp)
        return self._list(op)

    def _get(self, op: GetOp) -> Item | None:
        key = layout.stored_key(op.namespace, op.key)
        found = self._scope.get_versioned(key)
        if not layout.is_envelope_of(found.value, op.namespace, op.key):
            return None
        if op.refresh_ttl:
            self._refresh(key, found)
        return Item(**_fields(found.value))

    def _search(self, op: SearchOp) -> list[SearchItem]:
        hits = [
            (key, found)
            for key, found in self._scan(op.namespace_prefix)
            if query.matches(found.value["value"], op.filter)
        ]
        if op.query and self._index is not None:
            chosen = _by_meaning(hits, self._index.embeddings.embed_query(op.query), op)
        else:
            chosen = [(None, hit) for hit in query.page(hits, _updated_at, op.offset, op.limit)]
        if op.refresh_ttl:
            for _, (key, found) in chosen:
                self._refresh(key, found)
        return [SearchItem(**_fields(copied(found.value)), score=score) for score, (_, found) in chosen]

    def _scan(self, prefix: tuple[str, ...]) -> Iterator[tuple[str, Versioned]]:
        """Every item under ``prefix`` as listed now; only those not read at their version are read."""
        for key, version in self._scope.keys(layout.scan_prefix(prefix)):
            found = _cached(self._cache, key, version) or self._cache_read(key, self._scope.get_versioned(key))
            if _under(found.value, prefix):
                yield key, found

    def _cache_read(self, key: str, found: Versioned) -> Versioned:
        if found.version:
            self._cache.put(key, found.version, found.value)
        return found

    def _list(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        found = set()
        for key, _ in self._scope.keys(layout.scan_prefix(query.plain_prefix(conditions))):
            namespace = layout.namespace_of(key)
            if namespace is None:
                namespace = _namespace(self._scope.get(key))
            if namespace is not None:
                found.add(namespace)
        return query.namespaces(found, conditions, op.max_depth, op.offset, op.limit)

    def _refresh(self, key: str, found: Versioned) -> None:
        minutes = found.value.get("ttl_minutes")
        if minutes is None or not self._refreshes:
            return
        with suppress(VersionConflict):  # written or deleted since it was read: that write set the expiry
            self._scope.patch(key, {}, if_version=found.version, ttl_seconds=layout.ttl_seconds(minutes))

    def update(
        self,
        namespace: tuple[str, ...],
        key: str,
        fn: Callable[[dict[str, Any] | None], Mapping[str, Any] | None],
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> Mapping[str, Any] | None:
        """Read, change and write one item as one atomic step: beyond ``BaseStore``, whose get then put
        loses concurrent changes. ``fn`` gets the item's value (None when absent) and returns its new
        value (None deletes it); it runs again when another write came first, so it must have no side
        effects. ``ttl`` as for ``put``. Returns the value written."""
        op = _update_op(namespace, key, self.ttl_config, ttl)
        written = self._commit([op], lambda current: [op._replace(value=fn(_value_of(current[0], op)))])
        return written[0].value

    def _write(self, puts: list[PutOp]) -> None:
        self._commit(puts, lambda current: puts)

    def _commit(self, planned: list[PutOp], plan: Callable[[list[Versioned | None]], list[PutOp]]) -> list[PutOp]:
        """Write ``plan(current)`` over the versions read (puts read theirs, plain deletes need not),
        as one keepstate batch; read and plan again when another write came first."""
        keys = [layout.stored_key(op.namespace, op.key) for op in planned]
        for attempt in range(UPDATE_TRIES):
            current = [
                None if op.value is None else self._scope.get_versioned(key)
                for op, key in zip(planned, keys, strict=True)
            ]
            puts = plan(current)
            vectors = {} if self._index is None else self._index.embed(puts)
            try:
                with self._scope.batch() as writes:
                    _queue(writes, puts, keys, current, vectors)
                return puts
            except VersionConflict:
                time.sleep(backoff_seconds(attempt))
        raise _kept_conflicting(planned)

    def _register(self) -> None:
        """Make the scope's session known to the console, once per store object."""
        if not self._registered:
            session_id, agent, env = self._session
            self.store.register_session(session_id, agent, env=env)
            self._registered = True

    def _sweep(self) -> int:
        """The store's own sweep, below the public API: a ``Scope`` has none (expiry needs no sweep to
        be exact), and ``sweep_ttl`` is LangGraph's call to free the space, as ``keepstate serve``'s
        upkeep does through the same state facet."""
        swept = total = self.store.state.sweep(SWEEP_BATCH)
        while swept == SWEEP_BATCH:
            swept = self.store.state.sweep(SWEEP_BATCH)
            total += swept
        return total

    # ------------------------------------------------------------ async face

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._check_open()
        checked = _checked(ops)
        results = [None if isinstance(op, PutOp) else await self._aread(op) for op in checked]
        puts = _last_wins(checked)
        if puts:
            await self._aregister()
        for chunk in _chunks(puts):
            await self._awrite(chunk)
        return results

    async def _aread(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return await self._aget(op)
        if isinstance(op, SearchOp):
            return await self._asearch(op)
        assert isinstance(op, ListNamespacesOp)
        return await self._alist(op)

    async def _aget(self, op: GetOp) -> Item | None:
        key = layout.stored_key(op.namespace, op.key)
        found = await self._ascope.get_versioned(key)
        if not layout.is_envelope_of(found.value, op.namespace, op.key):
            return None
        if op.refresh_ttl:
            await self._arefresh(key, found)
        return Item(**_fields(found.value))

    async def _asearch(self, op: SearchOp) -> list[SearchItem]:
        hits = [
            (key, found)
            async for key, found in self._ascan(op.namespace_prefix)
            if query.matches(found.value["value"], op.filter)
        ]
        if op.query and self._index is not None:
            chosen = _by_meaning(hits, await self._index.embeddings.aembed_query(op.query), op)
        else:
            chosen = [(None, hit) for hit in query.page(hits, _updated_at, op.offset, op.limit)]
        if op.refresh_ttl:
            for _, (key, found) in chosen:
                await self._arefresh(key, found)
        return [SearchItem(**_fields(copied(found.value)), score=score) for score, (_, found) in chosen]

    async def _ascan(self, prefix: tuple[str, ...]) -> AsyncIterator[tuple[str, Versioned]]:
        async for key, version in self._ascope.keys(layout.scan_prefix(prefix)):
            found = _cached(self._cache, key, version) or self._cache_read(key, await self._ascope.get_versioned(key))
            if _under(found.value, prefix):
                yield key, found

    async def _alist(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        found = set()
        async for key, _ in self._ascope.keys(layout.scan_prefix(query.plain_prefix(conditions))):
            namespace = layout.namespace_of(key)
            if namespace is None:
                namespace = _namespace(await self._ascope.get(key))
            if namespace is not None:
                found.add(namespace)
        return query.namespaces(found, conditions, op.max_depth, op.offset, op.limit)

    async def _arefresh(self, key: str, found: Versioned) -> None:
        minutes = found.value.get("ttl_minutes")
        if minutes is None or not self._refreshes:
            return
        with suppress(VersionConflict):
            await self._ascope.patch(key, {}, if_version=found.version, ttl_seconds=layout.ttl_seconds(minutes))

    async def aupdate(
        self,
        namespace: tuple[str, ...],
        key: str,
        fn: Callable[[dict[str, Any] | None], Mapping[str, Any] | None],
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> Mapping[str, Any] | None:
        """``update`` for async code (``fn`` is a plain function)."""
        op = _update_op(namespace, key, self.ttl_config, ttl)
        written = await self._acommit([op], lambda current: [op._replace(value=fn(_value_of(current[0], op)))])
        return written[0].value

    async def _awrite(self, puts: list[PutOp]) -> None:
        await self._acommit(puts, lambda current: puts)

    async def _acommit(
        self, planned: list[PutOp], plan: Callable[[list[Versioned | None]], list[PutOp]]
    ) -> list[PutOp]:
        keys = [layout.stored_key(op.namespace, op.key) for op in planned]
        for attempt in range(UPDATE_TRIES):
            current = [
                None if op.value is None else await self._ascope.get_versioned(key)
                for op, key in zip(planned, keys, strict=True)
            ]
            puts = plan(current)
            vectors = {} if self._index is None else await self._index.aembed(puts)
            try:
                async with self._ascope.batch() as writes:
                    _queue(writes, puts, keys, current, vectors)
                return puts
            except VersionConflict:
                await asyncio.sleep(backoff_seconds(attempt))
        raise _kept_conflicting(planned)

    async def _aregister(self) -> None:
        if not self._registered:
            session_id, agent, env = self._session
            await self.store.aregister_session(session_id, agent, env=env)
            self._registered = True

    async def _asweep(self) -> int:
        facet = await self.store.async_state()
        swept = total = await facet.sweep(SWEEP_BATCH)
        while swept == SWEEP_BATCH:
            swept = await facet.sweep(SWEEP_BATCH)
            total += swept
        return total

    def _sweep_seconds(self, minutes: float | None) -> float:
        configured = self.ttl_config.get("sweep_interval_minutes") if self.ttl_config else None
        return 60 * float(minutes or configured or DEFAULT_SWEEP_MINUTES)

    def _close_store(self) -> None:
        self._closed = True
        if self._owns:
            self.store.close()


class KeepstateStore(_KeepstateBaseStore):
    """A LangGraph ``BaseStore`` on a keepstate store, for sync code (``SqliteStore``'s calls)."""

    _sweeper: threading.Thread | None = None
    _sweeper_future: concurrent.futures.Future[None] | None = None
    _stop_sweeping: threading.Event | None = None

    def setup(self) -> None:
        """Nothing to migrate (keepstate does that on first use): registers the console's session."""
        self._register()

    def sweep_ttl(self) -> int:
        """Free the space of expired keys now; how many. Reads never needed it."""
        return self._sweep()

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Sweep every interval on a daemon thread, until ``stop_ttl_sweeper`` or the future is cancelled."""
        if self._sweeper is not None and self._sweeper.is_alive() and self._sweeper_future is not None:
            return self._sweeper_future
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config:
            future.set_result(None)
            return future
        stop = self._stop_sweeping = threading.Event()
        future.add_done_callback(lambda done: stop.set() if done.cancelled() else None)
        self._sweeper_future = future
        self._sweeper = threading.Thread(
            target=self._sweep_every,
            name="keepstate-store-ttl-sweeper",
            daemon=True,
            args=(self._sweep_seconds(sweep_interval_minutes), stop, future),
        )
        self._sweeper.start()
        return future

    def _sweep_every(self, seconds: float, stop: threading.Event, future: concurrent.futures.Future[None]) -> None:
        while not stop.wait(seconds):
            try:
                self._sweep()
            except Exception:
                logger.exception("keepstate store TTL sweep failed")
        if not future.done():
            future.set_result(None)

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; False when it did not stop within ``timeout`` seconds."""
        if self._sweeper is None or self._stop_sweeping is None:
            return True
        self._stop_sweeping.set()
        self._sweeper.join(timeout)
        if self._sweeper.is_alive():
            return False
        self._sweeper = None
        return True

    def close(self) -> None:
        """Stop the sweeper; close the keepstate store when this object opened it."""
        self.stop_ttl_sweeper()
        self._close_store()

    async def aclose(self) -> None:
        await self.store.aclose()
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


class AsyncKeepstateStore(_KeepstateBaseStore, AsyncBatchedBaseStore):
    """A LangGraph ``BaseStore`` on a keepstate store, for async code (``AsyncSqliteStore``'s calls).

    Made inside its event loop, as LangGraph's async stores are: the calls of one loop tick are
    gathered into one ``abatch`` (LangGraph's ``AsyncBatchedBaseStore``), so a thousand concurrent
    calls are a few batches, not a thousand waits for a connection of a PostgreSQL pool."""

    _sweeper_task: asyncio.Task[None] | None = None
    _stop_sweeping: asyncio.Event | None = None

    def _attach(self, *args: Any, **kwargs: Any) -> None:
        super()._attach(*args, **kwargs)
        AsyncBatchedBaseStore.__init__(self)  # binds the running loop and starts its queue's task

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """The sync face, refused on the event loop's thread (it would block the loop), as LangGraph's
        async stores refuse it; from any other thread it works."""
        _refuse_on_loop()
        return super().batch(ops)

    def update(
        self,
        namespace: tuple[str, ...],
        key: str,
        fn: Callable[[dict[str, Any] | None], Mapping[str, Any] | None],
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> Mapping[str, Any] | None:
        _refuse_on_loop()
        return super().update(namespace, key, fn, ttl=ttl)

    async def setup(self) -> None:
        """Nothing to migrate (keepstate does that on first use): registers the console's session."""
        await self._aregister()

    async def sweep_ttl(self) -> int:
        """Free the space of expired keys now; how many. Reads never needed it."""
        return await self._asweep()

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep every interval in a task of the running loop, until ``stop_ttl_sweeper``."""
        if self._sweeper_task is not None and not self._sweeper_task.done():
            return self._sweeper_task
        if not self.ttl_config:
            return asyncio.create_task(asyncio.sleep(0))
        stop = self._stop_sweeping = asyncio.Event()
        self._sweeper_task = asyncio.create_task(
            self._sweep_every(self._sweep_seconds(sweep_interval_minutes), stop), name="keepstate-store-ttl-sweeper"
        )
        return self._sweeper_task

    async def _sweep_every(self, seconds: float, stop: asyncio.Event) -> None:
        while True:
            try:
                await asyncio.wait_for(stop.wait(), seconds)
                return
            except TimeoutError:
                pass
            try:
                await self._asweep()
            except Exception:
                logger.exception("keepstate store TTL sweep failed")

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; False when it did not stop within ``timeout`` seconds."""
        task = self._sweeper_task
        if task is None or task.done() or self._stop_sweeping is None:
            return True
        self._stop_sweeping.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            return False
        self._sweeper_task = None
        return True

    async def aclose(self) -> None:
        """Stop the sweeper and this loop's connections; close the keepstate store when this object opened it."""
        await self.stop_ttl_sweeper()
        task = self._task
        if task is not None:  # the queue's task: a later call starts it again, once this one has ended
            task.cancel()
            await asyncio.wait([task])
        await self.store.aclose()
        self._close_store()

    def close(self) -> None:
        self._close_store()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()


def _checked(ops: Iterable[Op]) -> list[Op]:
    """Every op checked before any is run: a bad one in a batch writes nothing."""
    checked = list(ops)
    for op in checked:
        if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
            raise ValueError(f"Unknown store operation: {op!r:.80}")
        validate_op_namespace(op)
        if isinstance(op, SearchOp):
            query.check_filter(op.filter)
    return checked


def _last_wins(ops: list[Op]) -> list[PutOp]:
    """The batch's puts, one per item: the last one given (as LangGraph's stores apply them)."""
    return list({(tuple(op.namespace), op.key): op for op in ops if isinstance(op, PutOp)}.values())


def _chunks(puts: list[PutOp]) -> list[list[PutOp]]:
    return [puts[start : start + MAX_BATCH_OPS] for start in range(0, len(puts), MAX_BATCH_OPS)]


def _queue(
    writes: Batch | AsyncBatch,
    puts: list[PutOp],
    keys: list[str],
    current: list[Versioned | None],
    vectors: dict[int, str | None],
) -> None:
    """Queue each put over the version read (keeping the item's ``created_at``), with its vectors, or
    delete (over the version read, if one was)."""
    stamp = layout.now()
    for index, (op, key, found) in enumerate(zip(puts, keys, current, strict=True)):
        if op.value is None or found is None:
            writes.delete(key, if_version=None if found is None else found.version)
            continue
        created = found.value["created_at"] if layout.is_envelope_of(found.value, op.namespace, op.key) else stamp
        item = layout.envelope(op.namespace, op.key, op.value, created, stamp, op.ttl, vectors.get(index))
        writes.put(key, item, if_version=found.version, ttl_seconds=layout.ttl_seconds(op.ttl))


def _update_op(
    namespace: tuple[str, ...], key: str, config: TTLConfig | None, ttl: float | NotProvided | None
) -> PutOp:
    """The put an update plans (its value to come), its namespace checked as ``put`` checks it."""
    if not namespace or namespace[0] == "langgraph":
        raise InvalidNamespaceError(f"An item's namespace must be non-empty, its root not 'langgraph': {namespace}")
    minutes = (config or {}).get("default_ttl") if isinstance(ttl, NotProvided) else ttl
    op = PutOp(tuple(namespace), str(key), {}, ttl=minutes)
    validate_op_namespace(op)
    return op


def _value_of(found: Versioned | None, op: PutOp) -> dict[str, Any] | None:
    if found is None or not layout.is_envelope_of(found.value, op.namespace, op.key):
        return None
    return dict(found.value["value"])


def _kept_conflicting(puts: list[PutOp]) -> VersionConflict:
    return VersionConflict(f"{len(puts)} put(s) kept meeting concurrent writes after {UPDATE_TRIES} tries")


def _fields(envelope: dict[str, Any]) -> dict[str, Any]:
    return {
        "namespace": tuple(envelope["namespace"]),
        "key": envelope["key"],
        "value": envelope["value"],
        "created_at": envelope["created_at"],
        "updated_at": envelope["updated_at"],
    }


def _cached(cache: VersionCache, key: str, version: int) -> Versioned | None:
    value = cache.get(key, version)
    return None if value is None else Versioned(value, version)


def _by_meaning(
    hits: list[tuple[str, Versioned]], vector: list[float], op: SearchOp
) -> list[tuple[float | None, tuple[str, Versioned]]]:
    """The page of ``op`` by the cosine similarity of each item's nearest vector to the query's."""
    return ranked([(best_score(vector, hit[1].value.get("vectors")), hit) for hit in hits], op.offset, op.limit)


def _updated_at(hit: tuple[str, Versioned]) -> str:
    return str(hit[1].value["updated_at"])


def _under(found: Any, prefix: tuple[str, ...]) -> bool:
    """Whether a stored value is an item whose namespace starts with ``prefix``."""
    return (
        isinstance(found, dict)
        and "value" in found
        and tuple(found.get("namespace", ()))[: len(prefix)] == tuple(prefix)
    )


def _namespace(found: Any) -> tuple[str, ...] | None:
    return tuple(found["namespace"]) if isinstance(found, dict) and "namespace" in found else None


def _refuse_on_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise asyncio.InvalidStateError(
        "Synchronous calls to AsyncKeepstateStore would block the event loop: use the a-prefixed calls "
        "(aget, aput, asearch, aupdate, ...), or KeepstateStore in sync code."
    )
