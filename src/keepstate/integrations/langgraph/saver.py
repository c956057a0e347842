"""``KeepstateSaver``: a LangGraph checkpointer on any keepstate store, sync and async.

Layout (keys.py): each thread is the session scope of agent ``langgraph``; in it, per namespace, a
``head`` (the latest checkpoint id, compare-and-set), one record per checkpoint (the checkpoint
without its values, its stored channel versions, metadata, parent), one blob per (channel, version)
written only for the channels LangGraph updated, and one list of pending writes per checkpoint
(appended, so concurrent tasks never overwrite each other). List channels are stored as deltas on
their previous version (blobs.py) and their decoded values kept in the process (bounded), so a turn
writes and reads what changed, not the whole history. The agent scope indexes the threads (for
``list(None)``) and the checkpoints of each run (for ``delete_for_runs``). The root namespace's
messages are also kept readable (``{role, content, id}`` items of the list ``messages``) and the thread
registered as a session, so ``keepstate serve``'s console shows it as a conversation.

Every put is one atomic batch guarded by the head's version; a put whose head moved in the meantime
is planned again. When another process moved the head while this one ran, list channels are merged
(rebase.py): two processes invoking one thread lose nothing. A put that keeps losing claims the next
turn (turns.py), so a slow merge is not starved by another process's fast plain puts.

Both faces run the sync core on the saver's one worker thread: it orders the calls, which share the
caches, and keeps one connection of the store (LangGraph calls from a new thread each invoke).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

import keepstate
from keepstate import Scope, Store
from keepstate.errors import TooLarge, VersionConflict
from keepstate.protocol import MAX_BATCH_OPS

from . import blobs, keys, maintenance, readable, turns
from .cache import Lru
from .rebase import MISSING, Side, Stored, Version, View, merged, same, written

PUT_PATIENCE_S = 30.0
"""How long a put retries while other processes keep moving the thread's head. A bound on time, not
on tries: a writer whose merge takes longer than the others' plain puts can lose dozens of times in a
row while they keep writing (55 tries seen with two processes on PostgreSQL), and wins once they pause."""
PUT_BACKOFF_MAX_S = 0.05
LIST_CACHE = 256
"""Decoded list values kept per saver (each a tuple of references, not a copy of the items)."""
RECORD_CACHE = 1024
EMPTY_THREAD = ""
"""What this process saw as the latest of a namespace that had no checkpoint yet."""

Found = list[CheckpointTuple]
Writes = list[tuple[str, str, Any]]
Tails = list[list[blobs.Encoded]]
T = TypeVar("T")


@dataclass
class _Plan:
    """One put, planned against one head: the writes of its batch and what to remember after."""

    versions: dict[str, Version] = field(default_factory=dict)
    stored: dict[str, Stored] = field(default_factory=dict)
    views: dict[str, View] = field(default_factory=dict)


class _Writes(Protocol):
    """A scope, or a batch's writes on one: where the index entries go."""

    def put(self, key: str, value: Any) -> Any: ...

    def append(self, key: str, items: list[Any]) -> Any: ...


class KeepstateSaver(BaseCheckpointSaver[str]):
    """A ``BaseCheckpointSaver`` keeping LangGraph's checkpoints in a keepstate store.

    ``KeepstateSaver(url)`` opens the store (closed by ``close()``/``aclose()``);
    ``KeepstateSaver.from_store(store)`` shares an open one and leaves it open.
    """

    def __init__(
        self, url: str, *, serde: SerializerProtocol | None = None, env: str = "default", _store: Store | None = None
    ) -> None:
        super().__init__(serde=serde)
        self.store = _store if _store is not None else keepstate.open(url)
        self._owns_store = _store is None
        self._env = env
        self._on_worker = threading.local()
        self._worker = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="keepstate-saver",
            initializer=lambda: setattr(self._on_worker, "yes", True),
        )
        self._closed = False
        self._lists: Lru[tuple[str, str, str, Version], tuple[tuple[Any, ...], int]] = Lru(LIST_CACHE)
        self._versions: Lru[tuple[str, str, str], dict[str, Version]] = Lru(RECORD_CACHE)
        self._views: Lru[tuple[str, str, str], dict[str, View]] = Lru(RECORD_CACHE)
        self._seen: Lru[tuple[str, str], str] = Lru(RECORD_CACHE)
        self._known: set[str] = set()
        self._runs: Lru[tuple[str, str, str], bool] = Lru(RECORD_CACHE)
        """(run, thread, namespace) already in the run index: one entry per run there, not per checkpoint."""

    @classmethod
    def from_store(
        cls, store: Store, *, serde: SerializerProtocol | None = None, env: str = "default"
    ) -> KeepstateSaver:
        return cls(store.url, serde=serde, env=env, _store=store)

    # -- lifecycle

    def close(self) -> None:
        """End the worker thread, and close the store if this saver opened it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_store:
            self._worker.submit(self.store.close).result()
        self._worker.shutdown()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> KeepstateSaver:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> KeepstateSaver:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    # -- scopes

    def _thread(self, thread_key: str) -> Scope:
        return self.store.scope("session", agent=keys.AGENT, id=thread_key, env=self._env)

    def _index(self) -> Scope:
        return self.store.scope("agent", agent=keys.AGENT, env=self._env)

    # -- reading

    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        thread_key, wanted = keys.thread_key(thread_id), get_checkpoint_id(config)
        scope = self._thread(thread_key)
        record = self._record(scope, ns, wanted) if wanted else self._latest(scope, ns)
        if not wanted:
            self._seen.put((thread_key, ns), record["id"] if record else EMPTY_THREAD)
        if record is None:
            return None
        self._views.pop((thread_key, ns, record["id"]))
        return self._tuple(scope, thread_id, thread_key, record)

    def _listed(
        self, config: RunnableConfig | None, wanted: dict[str, Any], before: RunnableConfig | None, limit: int | None
    ) -> Found:
        configurable = config["configurable"] if config else {}
        ns = configurable.get("checkpoint_ns")
        only = get_checkpoint_id(config) if config else None
        below = get_checkpoint_id(before) if before else None
        threads = [str(configurable["thread_id"])] if config else self._thread_ids()
        found: Found = []
        for thread_id in threads:
            thread_key = keys.thread_key(thread_id)
            scope = self._thread(thread_key)
            for record in self._records(scope, ns):
                if limit is not None and len(found) >= limit:
                    return found
                if (only and record["id"] != only) or (below and record["id"] >= below):
                    continue
                metadata = blobs.decode(self.serde, record["metadata"])
                if all(metadata.get(name) == value for name, value in wanted.items()):
                    found.append(self._tuple(scope, thread_id, thread_key, record, metadata))
        return found

    def _thread_ids(self) -> Iterator[str]:
        index = self._index()
        for key, _ in list(index.keys(f"{keys.THREAD_INDEX}.")):
            yield index.get(key)["thread_id"]

    def _records(self, scope: Scope, ns: str | None) -> Iterator[dict[str, Any]]:
        """The thread's checkpoint records (of ``ns``, or of every namespace), newest first."""
        names = sorted(
            (key for key, _ in scope.keys(keys.checkpoints_prefix(ns))),
            key=lambda key: key.rsplit(".", 1)[1],
            reverse=True,
        )
        for name in names:
            record = scope.get(name)
            if record is not None:
                yield record

    def _record(self, scope: Scope, ns: str, checkpoint_id: str) -> dict[str, Any] | None:
        record: dict[str, Any] | None = scope.get(keys.checkpoint(ns, checkpoint_id))
        return record

    def _latest(self, scope: Scope, ns: str) -> dict[str, Any] | None:
        head = scope.get(keys.head(ns))
        record = self._record(scope, ns, head["id"]) if head else None
        if record is None and head is not None:  # its checkpoint was deleted: the newest left
            record = next(self._records(scope, ns), None)
        return record

    def _tuple(
        self, scope: Scope, thread_id: str, thread_key: str, record: dict[str, Any], metadata: Any = MISSING
    ) -> CheckpointTuple:
        ns, checkpoint_id, versions = record["ns"], record["id"], record["versions"]
        self._versions.put((thread_key, ns, checkpoint_id), versions)
        values = {}
        for channel, version in versions.items():
            side = self._side(scope, thread_key, ns, channel, version)
            if side.value is not MISSING:
                values[channel] = list(side.value) if type(side.value) is tuple else side.value  # the cache's
        checkpoint: Checkpoint = {
            **blobs.decode(self.serde, record["checkpoint"]),  # type: ignore[typeddict-item]
            "channel_versions": dict(versions),
            "channel_values": values,
        }
        parent = record.get("parent")
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=blobs.decode(self.serde, record["metadata"]) if metadata is MISSING else metadata,
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=self._pending_writes(scope, ns, checkpoint_id),
        )

    def _side(self, scope: Scope, thread_key: str, ns: str, channel: str, version: Version | None) -> Side:
        """A channel's stored value at ``version`` (lists as tuples, from the cache when there)."""
        if version is None:
            return Side(None)
        cached = self._lists.get((thread_key, ns, channel, version))
        if cached is not None:
            return Side(version, cached[0], cached[1])
        record = scope.get(keys.blob(ns, channel, version))
        if record is None or "empty" in record:
            return Side(version)
        if not blobs.is_list(record):
            return Side(version, blobs.decode(self.serde, record["v"]))
        items = self._list_items(scope, thread_key, ns, channel, version, record)
        self._lists.put((thread_key, ns, channel, version), (items, blobs.depth(record)))
        return Side(version, items, blobs.depth(record))

    def _list_items(
        self, scope: Scope, thread_key: str, ns: str, channel: str, version: Version, record: blobs.Record
    ) -> tuple[Any, ...]:
        """Walk the deltas back to a cached version or a snapshot, then apply them in order."""
        tails: Tails = []
        start: tuple[Any, ...] = ()
        while "base" in record:
            tails.append(record["tail"])
            version = record["base"]
            cached = self._lists.get((thread_key, ns, channel, version))
            if cached is not None:
                start = cached[0]
                break
            base = scope.get(keys.blob(ns, channel, version))
            if base is None:
                raise LookupError(f"the blob of {channel!r} at version {version!r} is missing")
            record = base
        else:
            start = tuple(self._snapshot_items(scope, keys.blob(ns, channel, version), record))
        added = [blobs.decode(self.serde, item) for tail in reversed(tails) for item in tail]
        return (*start, *added)

    def _snapshot_items(self, scope: Scope, name: str, record: blobs.Record) -> Iterator[Any]:
        parts = (
            [scope.get(keys.blob_part(name, index)) for index in range(record["parts"])]
            if "parts" in record
            else [record]
        )
        for part in parts:
            for item in part["items"]:
                yield blobs.decode(self.serde, item)

    def _pending_writes(self, scope: Scope, ns: str, checkpoint_id: str) -> Writes:
        """The checkpoint's writes, one per (task, index) — the first for regular writes, the last for
        special ones (errors, interrupts), as LangGraph's savers keep them — in ``writes_sort_key`` order."""
        kept: dict[tuple[str, int], list[Any]] = {}
        for task_id, index, channel, value, path in maintenance.all_items(scope, keys.writes(ns, checkpoint_id)):
            if index < 0 or (task_id, index) not in kept:
                kept[(task_id, index)] = [task_id, channel, value, path]
        ordered = sorted(kept.items(), key=lambda entry: writes_sort_key(entry[1][3], *entry[0]))
        return [(task_id, channel, blobs.decode(self.serde, value)) for _, (task_id, channel, value, _) in ordered]

    # -- writing

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        parent: str | None = configurable.get("checkpoint_id")
        thread_key = keys.thread_key(thread_id)
        meta = get_checkpoint_metadata(config, metadata)
        self._register(thread_id, thread_key)
        scope = self._thread(thread_key)
        give_up, turn, losses = time.monotonic() + PUT_PATIENCE_S, turns.Turn(), 0
        while True:
            if time.monotonic() >= give_up:
                raise VersionConflict(
                    f"the head of thread {thread_id!r} kept moving for {PUT_PATIENCE_S:g} s ({losses} tries lost)"
                )
            head = scope.get_versioned(keys.head(ns))
            if turn.waits(head):
                time.sleep(turns.POLL_S)
                continue
            head_version = turn.claim(scope, keys.head(ns), head, losses)
            if head_version is not None:
                plan = self._plan(
                    scope, thread_key, ns, parent, head.value["id"] if head.version else None, checkpoint, new_versions
                )
                try:
                    self._write(scope, thread_id, thread_key, ns, parent, checkpoint, meta, plan, head_version)
                    break
                except VersionConflict:
                    pass
            losses += 1
            time.sleep(random.uniform(0, min(PUT_BACKOFF_MAX_S, 0.001 * 2 ** min(losses, 16))))
        self._remember(thread_key, ns, checkpoint["id"], meta.get("run_id"), plan)
        return _config(thread_id, ns, checkpoint["id"])

    def _plan(
        self,
        scope: Scope,
        thread_key: str,
        ns: str,
        parent: str | None,
        head: str | None,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
    ) -> _Plan:
        """How each channel of ``checkpoint`` is stored, given the thread's current head."""
        raced = head is not None and head != parent and self._seen.get((thread_key, ns)) == (parent or EMPTY_THREAD)
        view = self._views.get((thread_key, ns, parent)) if parent else None
        base_id = head if raced else parent
        parent_versions = self._stored_versions(scope, thread_key, ns, parent)
        base_versions = self._stored_versions(scope, thread_key, ns, base_id) if raced else parent_versions
        rebasing = raced or view is not None
        plan = _Plan()
        values = checkpoint["channel_values"]
        for channel, version in checkpoint["channel_versions"].items():
            wrote = channel in new_versions
            if not rebasing:
                plan.versions[channel] = version
                if wrote:
                    base = self._side(scope, thread_key, ns, channel, parent_versions.get(channel))
                    plan.stored[channel] = written(self.serde, version, values.get(channel, MISSING), base)
                continue
            self._plan_rebased(
                scope,
                thread_key,
                ns,
                plan,
                channel,
                version,
                values.get(channel, MISSING),
                wrote,
                (view or {}).get(channel),
                parent_versions,
                base_versions,
            )
        if rebasing:
            self._carry_over(plan, checkpoint, parent_versions, base_versions, view or {})
        return plan

    @staticmethod
    def _carry_over(
        plan: _Plan,
        checkpoint: Checkpoint,
        parent_versions: dict[str, Version],
        base_versions: dict[str, Version],
        view: dict[str, View],
    ) -> None:
        """The channels another process created since this one read the thread: kept, and
        remembered as unseen so that this process's later values are merged into them."""
        for channel, version in base_versions.items():
            if channel not in checkpoint["channel_versions"] and channel not in parent_versions and channel not in view:
                plan.versions[channel] = version
                plan.views[channel] = (None, ())

    def _plan_rebased(
        self,
        scope: Scope,
        thread_key: str,
        ns: str,
        plan: _Plan,
        channel: str,
        version: Version,
        value: Any,
        wrote: bool,
        seen: View | None,
        parent_versions: dict[str, Version],
        base_versions: dict[str, Version],
    ) -> None:
        view = Side(*seen) if seen else self._side(scope, thread_key, ns, channel, parent_versions.get(channel))
        base = self._side(scope, thread_key, ns, channel, base_versions.get(channel))
        given = Side(version, view.value if value is MISSING and not wrote else value)
        if same(view, base) and seen is None:
            plan.versions[channel] = version if wrote else base.version if base.version is not None else version
            if wrote:
                plan.stored[channel] = written(self.serde, version, given.value, base)
            return
        stored = merged(self.serde, given, view, base, lambda current: self.get_next_version(str(current), None))
        if stored is None:  # not mergeable: stored as given
            plan.versions[channel] = version
            if wrote or seen is not None:
                plan.stored[channel] = written(self.serde, version, given.value, Side(None))
            return
        plan.versions[channel] = stored.version
        plan.stored[channel] = stored
        if stored.view is not None:
            plan.views[channel] = stored.view

    def _stored_versions(self, scope: Scope, thread_key: str, ns: str, checkpoint_id: str | None) -> dict[str, Version]:
        if checkpoint_id is None:
            return {}
        cached = self._versions.get((thread_key, ns, checkpoint_id))
        if cached is not None:
            return cached
        record = self._record(scope, ns, checkpoint_id)
        versions: dict[str, Version] = record["versions"] if record else {}
        self._versions.put((thread_key, ns, checkpoint_id), versions)
        return versions

    def _write(
        self,
        scope: Scope,
        thread_id: str,
        thread_key: str,
        ns: str,
        parent: str | None,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        plan: _Plan,
        head_version: int,
    ) -> None:
        """The put as batches: the blobs first when they do not fit one, then the checkpoint and its head."""
        blob_writes = list(self._blob_writes(ns, plan))
        record = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": parent,
            "versions": plan.versions,
            "checkpoint": blobs.encode(
                self.serde,
                {key: value for key, value in checkpoint.items() if key not in ("channel_values", "channel_versions")},
            ),
            "metadata": blobs.encode(self.serde, metadata),
            "run_id": metadata.get("run_id"),
        }
        while len(blob_writes) > MAX_BATCH_OPS - 6:
            chunk, blob_writes = blob_writes[:MAX_BATCH_OPS], blob_writes[MAX_BATCH_OPS:]
            with scope.batch() as batch:
                for key, value in chunk:
                    batch.put(key, value)
        conversation = readable.update(plan.stored.values()) if ns == "" else None
        try:
            self._commit(scope, thread_id, thread_key, ns, record, blob_writes, conversation, head_version)
        except TooLarge:
            if conversation is None:
                raise
            scope.trim(keys.MESSAGES, readable.KEEP_ON_FULL)  # the readable copy is full: keep its recent part
            try:
                self._commit(scope, thread_id, thread_key, ns, record, blob_writes, conversation, head_version)
            except TooLarge:  # still too large: the checkpoint matters, the readable copy is a view
                self._commit(scope, thread_id, thread_key, ns, record, blob_writes, None, head_version)

    def _commit(
        self,
        scope: Scope,
        thread_id: str,
        thread_key: str,
        ns: str,
        record: dict[str, Any],
        blob_writes: Sequence[tuple[str, Any]],
        conversation: readable.Change | None,
        head_version: int,
    ) -> None:
        with scope.batch() as batch:
            for key, value in blob_writes:
                batch.put(key, value)
            batch.put(keys.checkpoint(ns, record["id"]), record)
            batch.put(keys.head(ns), {"id": record["id"], "ns": ns}, if_version=head_version)
            if conversation is not None:
                conversation.apply(batch, keys.MESSAGES)
            if self.store.database.capabilities.cross_scope_batches:
                self._index_writes(batch.on(self._index()), thread_id, thread_key, ns, record["run_id"])
            else:  # a Redis Cluster: the index is another scope, so another slot; written just before
                self._index_writes(self._index(), thread_id, thread_key, ns, record["run_id"])

    def _index_writes(self, index: _Writes, thread_id: str, thread_key: str, ns: str, run_id: str | None) -> None:
        """The thread's entry in the index of threads and runs, unless this saver wrote it already. Written
        alone (a store without cross-scope batches), an entry may name a thread whose first checkpoint then
        failed: listings skip a thread without checkpoints, and deleting a run deletes what is there."""
        if thread_key not in self._known:
            index.put(keys.thread_entry(thread_key), {"thread_id": thread_id})
        if run_id is not None and self._runs.get((run_id, thread_key, ns)) is None:
            index.append(keys.run_entry(run_id), [[thread_key, ns]])

    def _blob_writes(self, ns: str, plan: _Plan) -> Iterator[tuple[str, Any]]:
        for channel, stored in plan.stored.items():
            if stored.record is None:
                continue
            name = keys.blob(ns, channel, stored.version)
            parted = blobs.split(stored.record)
            if parted is None:
                yield name, stored.record
                continue
            head, parts = parted
            for index, part in enumerate(parts):
                yield keys.blob_part(name, index), part
            yield name, head

    def _remember(self, thread_key: str, ns: str, checkpoint_id: str, run_id: str | None, plan: _Plan) -> None:
        self._known.add(thread_key)
        self._seen.put((thread_key, ns), checkpoint_id)
        self._versions.put((thread_key, ns, checkpoint_id), plan.versions)
        if run_id is not None:
            self._runs.put((run_id, thread_key, ns), True)
        for channel, stored in plan.stored.items():
            if stored.items is not None:
                depth = 0 if stored.record is None or "base" not in stored.record else blobs.depth(stored.record)
                self._lists.put((thread_key, ns, channel, stored.version), (stored.items, depth))
        if plan.views:
            self._views.put((thread_key, ns, checkpoint_id), plan.views)

    def _register(self, thread_id: str, thread_key: str) -> None:
        """Make the thread a session the console lists, once per thread and process."""
        if thread_key not in self._known:
            self.store.register_session(thread_key, keys.AGENT, metadata={"thread_id": thread_id}, env=self._env)

    def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        configurable = config["configurable"]
        ns, checkpoint_id = configurable.get("checkpoint_ns", ""), configurable["checkpoint_id"]
        items = [
            [task_id, WRITES_IDX_MAP.get(channel, index), channel, blobs.encode(self.serde, value), task_path]
            for index, (channel, value) in enumerate(writes)
        ]
        if items:
            self._thread(keys.thread_key(str(configurable["thread_id"]))).append(keys.writes(ns, checkpoint_id), items)

    # -- deleting, copying, pruning

    def _forget(self, thread_key: str) -> None:
        self._known.discard(thread_key)
        for cache in (self._lists, self._versions, self._views, self._seen):
            cache.drop(lambda key: key[0] == thread_key)
        self._runs.drop(lambda key: key[1] == thread_key)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``NNNN(32 digits).random``: increasing, and two processes never pick the same one."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- the faces: every call runs on the saver's one worker thread

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the worker: one thread, hence one connection of the store, orders every
        call (LangGraph calls from a new thread each invoke; a connection per thread costs an open,
        and SQLite's busy wait between connections more than this queue)."""
        if getattr(self._on_worker, "yes", False):
            return fn(*args)
        return self._submit(fn, *args).result()

    async def _acall(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._submit(fn, *args))

    def _submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """``fn`` queued on the worker; ``StoreClosed`` once the saver is closed."""
        try:
            if not self._closed:
                return self._worker.submit(fn, *args)
        except RuntimeError:  # the worker shut down between the check and the submit
            pass
        raise keepstate.StoreClosed("this KeepstateSaver is closed: make a new one to use it")

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._call(self._get_tuple, config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Newest first within each thread; ``config=None`` lists every thread of the store."""
        yield from self._call(self._listed, config, filter or {}, before, limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._call(self._put, config, checkpoint, metadata, new_versions)

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._call(self._put_writes, config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self._call(maintenance.delete_thread, self, thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._call(maintenance.copy_thread, self, source_thread_id, target_thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._call(maintenance.delete_for_runs, self, run_ids)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._call(maintenance.prune, self, thread_ids, strategy)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._acall(self._get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in await self._acall(self._listed, config, filter or {}, before, limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._acall(self._put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._acall(self._put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._acall(maintenance.delete_thread, self, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._acall(maintenance.copy_thread, self, source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._acall(maintenance.delete_for_runs, self, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._acall(maintenance.prune, self, thread_ids, strategy)


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}
