"""The storage layer's contracts: the ``Database`` a URL opens, what it declares it can do, its facets.

A ``Database`` is one store (a SQLite file, a PostgreSQL database, a Redis, an in-process memory
space) as this process sees it. It declares its ``Capabilities`` — nothing above ``stores/`` ever
guesses them from a URL scheme or a class — and hands out *facets*, one per part of keepstate:

- ``StateFacet``: versioned JSON values and lists under (namespace, key): the State API;
- ``PlatformFacet``: keys, sessions, runs and invocations, each method one guarded atomic step;
- ``LeaseFacet``: per-session leases with fencing counters and fenced blobs (``keepstate.sessions``);
- ``HarnessFacet``: the harness store's sessions, operations and logs (``keepstate.harness``);
- ``DocumentsFacet``: an agent's memory, documents by path with full-text search on the store's own
  engine (``keepstate.platform.memory`` holds its rules).

Where two facets must act in one statement or transaction (a run token's lease read with a state
value; a session deleted, or forked, together with its state), that is a method of ``Database`` itself.

**Sync and async, one scheme.** Each facet's contract is written once, here. A facet used from
asyncio is an async ABC; the harness facet is synchronous, as the seed's store is; the state facet
and the documents facet have both faces (``StateFacet``/``DocumentsFacet`` for the server,
``SyncStateFacet``/``SyncDocumentsFacet`` for the embedded store). In-process
backends (memory, SQLite) implement a synchronous core — functions of a connection or of the
in-memory structure — and give it an async face (SQLite: writes group-committed on the file's one
writer thread, reads on the caller's thread). Network backends (PostgreSQL, Redis) implement the
async face and get the sync one from the one generic ``faces.Portal``, which runs their coroutines on
a private event-loop thread. ``tests/test_faces.py`` checks every sync/async pair for the same
methods with the same parameters.

**Writes as values, through one door.** A state write is a ``records.BatchOp`` (put, delete, append,
trim, pop, incr, patch). Each state facet implements one door for a write alone, ``write(op)``, with
its backend's fast path for the commonest inside (SQLite's put in autocommit, Redis' short scripts,
PostgreSQL's one-statement writes), and one for several atomically, ``batch(ops)``; the calls by name
(``put``, ``append``…) are written once below, on each face, as ops through that door. So a face that
only passes writes on (``faces.InlineAsync``, ``faces.Portal``) forwards two methods, and a new write
kind is one executor per backend and its op.

Rules every state facet keeps (``tests/conformance/test_scope.py`` checks each one):
- versions start at 1 and grow by one per write and never repeat for a key, also after a delete:
  a delete leaves a tombstone holding the last version;
- ``if_version`` 0 means "only if absent"; a mismatch raises VersionConflict(current_version);
- append is atomic, creates the list if needed, raises NotAList / TooLarge (1 MiB for the whole
  list, nothing added), and does not rewrite the existing list;
- every operation on one key is linearizable, also across processes sharing the store;
- driver errors become ``keepstate.Unavailable`` at the backend boundary, and only there.
"""

from __future__ import annotations

import asyncio
import random
import time
from abc import ABC, abstractmethod
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..errors import InvalidRequest
from ..search import Query
from .documents import (
    DocumentHead,
    DocumentRecord,
    DocumentWrite,
    PathFilter,
    StoredDocument,
    StoredHit,
    StoredPassage,
    Unembedded,
)
from .records import (
    AgentStats,
    BackupReport,
    BatchOp,
    Blob,
    BlobRecord,
    Claimed,
    Emitted,
    Entry,
    ListPage,
    NewEvent,
    Outcome,
    Patcher,
    RunContext,
    RunFilter,
    StateRecord,
    StoredEvent,
    StoredInvocation,
    StoredKey,
    StoredRun,
    StoredSession,
)
from .remembered import Answer, Memo, Remembered
from .session_forks import Cuts

T = TypeVar("T")

Row = tuple[Any, ...]
LeaseAndEntry = tuple[int | None, Entry | None]
"""A run token's lease end (None: not running) and a state entry (None: absent), read together."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a store can do, declared by its backend."""

    shared: bool
    """Several processes (and machines, for network stores) may use it at once."""
    platform: bool
    """Keys, sessions, runs and invocations: what ``keepstate serve`` needs."""
    leases: bool
    """The session store's leases and fenced blobs."""
    harness: bool
    """The harness store."""
    documents: bool
    """Memory: documents with full-text search on the store's own engine."""
    file_backup: bool = False
    """A consistent copy into one file, taken while the store is in use (``keepstate backup``)."""
    own_backup: str = ""
    """Without ``file_backup``: how the store is backed up with its own tools, for the refusal."""

    cross_scope_batches: bool = True
    """A batch may write to several scopes atomically. A Redis Cluster cannot: there a batch is atomic
    within one hash slot (one scope), and one spanning slots is refused before anything is written."""

    def require(self, facet: str, url: str) -> None:
        """Refuse, with the reason, a facet this store does not have."""
        if not getattr(self, facet):
            hint = self.own_backup if facet == "file_backup" else FACET_HINTS[facet]
            raise InvalidRequest(f"the store {redact(url)} has no {FACET_NAMES[facet]}: {hint}")


FACET_NAMES = {
    "platform": "platform records (keys, sessions, runs)",
    "leases": "session leases",
    "harness": "harness store",
    "shared": "sharing between processes",
    "documents": "memory documents",
    "file_backup": "backup into a file (keepstate backup)",
    "cross_scope_batches": "atomic batches across scopes",
}
FACET_HINTS = {
    "platform": "keys, sessions and runs need PostgreSQL or SQLite (Redis holds state and session stores only)",
    "leases": "use memory://, sqlite:///, postgresql:// or redis://",
    "harness": "use memory://, sqlite:/// or postgresql://",
    "shared": "memory:// lives in one process: use sqlite:/// or postgresql://",
    "documents": "memory needs SQLite or PostgreSQL (or memory:// in one process)",
    "cross_scope_batches": "a Redis Cluster keeps a batch atomic only within one scope's hash slot: use "
    "redis://, postgresql:// or sqlite:///",
}


def redact(url: str) -> str:
    """A store URL fit for a message: any password replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"


# ---------------------------------------------------------------- state


class StateFacet(ABC):
    """Versioned values and lists under ``(namespace, key)``, asynchronous face.

    Values arrive as canonical JSON bytes, already checked and size-limited by ``keepstate.values``
    (a facet never parses JSON except where a method says so). The rules, on every backend:

    - Versions start at 1, grow by one per write and never repeat for a key, also after a delete or
      an expiry (a tombstone keeps the last version). ``if_version=0`` means "only if absent"; a
      mismatch raises ``VersionConflict(current_version)`` (0 when absent) and writes nothing.
    - A *list* is a JSON array, whether written whole by ``put`` or built by ``append``. Appending,
      reading part of a list (``tail``, ``items``), ``trim`` and ``pop`` cost what the items they touch
      cost, never the whole list's length, for lists built by ``append`` (a list written whole by ``put``
      is read whole once, by its first append or trim). They raise ``NotAList`` on another value.
      A list never passes 1 MiB as compact JSON (``TooLarge``, nothing added).
    - **Expiry.** ``ttl_ms`` on a write sets the key to expire that long after it, by the store's own
      clock. ``put`` without it clears any expiry; every other write without it keeps the key's
      expiry. An expired key is absent for every call the moment it expires — reads, listings,
      ``if_version=0``, appends (a new list), ``incr`` (from 0), ``patch`` (from ``{}``) — whatever
      ``sweep`` has done, and its version still goes on from where it was. ``delete`` clears expiry.
    - Writes are linearizable per key, also across processes; ``batch`` is atomic across keys.
    - Driver errors become ``Unavailable``; nothing else from a driver ever escapes.
    """

    @abstractmethod
    async def get(self, ns: str, key: str) -> Entry | None:
        """The live entry (with its ``expires_at``), or None when absent, deleted or expired."""

    @abstractmethod
    async def write(self, op: BatchOp) -> Any:
        """One write of one key alone: the one door every write goes through (``op.op``: ``put``,
        ``delete``, ``append``, ``trim``, ``pop``, ``incr``, ``patch``), each backend keeping its fast
        path for the commonest inside it. Answers as the call of its name below does, and fails as that
        call alone does (``batch`` is the door for several, whose errors name the op's ``index``)."""

    async def put(
        self, ns: str, key: str, data: bytes, if_version: int | None = None, ttl_ms: int | None = None
    ) -> int:
        """Write ``data``; the new version."""
        version: int = await self.write(BatchOp("put", ns, key, data, if_version=if_version, ttl_ms=ttl_ms))
        return version

    async def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        """Delete; True when a live value was deleted."""
        deleted: bool = await self.write(BatchOp("delete", ns, key, if_version=if_version))
        return deleted

    async def append(self, ns: str, key: str, items: Sequence[bytes], ttl_ms: int | None = None) -> tuple[int, int]:
        """Append encoded items atomically, creating the list if needed; ``(version, length)``.
        An empty ``items`` is still a write (version + 1; an absent key becomes ``[]``)."""
        sized: tuple[int, int] = await self.write(BatchOp("append", ns, key, items=items, ttl_ms=ttl_ms))
        return sized

    async def trim(
        self, ns: str, key: str, keep_last: int, if_version: int | None = None, ttl_ms: int | None = None
    ) -> tuple[int, int]:
        """Drop the oldest items so that at most ``keep_last`` remain (a write: version + 1);
        ``(version, length)``. An absent key stays absent: ``(0, 0)``, nothing written."""
        op = BatchOp("trim", ns, key, keep_last=keep_last, if_version=if_version, ttl_ms=ttl_ms)
        sized: tuple[int, int] = await self.write(op)
        return sized

    async def pop(self, ns: str, key: str, if_version: int | None = None) -> tuple[bytes, int, int] | None:
        """Remove and return the last item (a write): ``(item, version, length)``; None, writing
        nothing, when the key is absent or the list empty."""
        popped: tuple[bytes, int, int] | None = await self.write(BatchOp("pop", ns, key, if_version=if_version))
        return popped

    async def incr(
        self, ns: str, key: str, by: int, if_version: int | None = None, ttl_ms: int | None = None
    ) -> tuple[int, int]:
        """Add ``by`` to an integer value, an absent one counting from 0: ``(value, version)``.
        ``NotAnInteger`` on another value; ``InvalidValue`` (nothing written) when the result leaves
        signed 64-bit."""
        counted: tuple[int, int] = await self.write(
            BatchOp("incr", ns, key, by=by, if_version=if_version, ttl_ms=ttl_ms)
        )
        return counted

    async def update(
        self, ns: str, key: str, patcher: Patcher, if_version: int | None = None, ttl_ms: int | None = None
    ) -> tuple[bytes, int]:
        """Rewrite a value with ``patcher`` (given the current canonical JSON, None when absent) in one
        atomic step: ``(new value, version)``. The store-side write behind ``PATCH``."""
        op = BatchOp("patch", ns, key, patcher=patcher, if_version=if_version, ttl_ms=ttl_ms)
        patched: tuple[bytes, int] = await self.write(op)
        return patched

    @abstractmethod
    async def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        """Live keys in key order, ``> after`` and starting with ``prefix``, at most ``limit``."""

    @abstractmethod
    async def drop(self, ns: str) -> None:
        """Delete every key of a namespace (keeping tombstones, so versions never repeat)."""

    @abstractmethod
    def records(self) -> AsyncIterator[StateRecord]:
        """Every key of the store, tombstones included (an expired key as one), for export."""

    @abstractmethod
    async def restore(self, record: StateRecord) -> None:
        """Write a record exactly as exported (its version and expiry included), for import."""

    @abstractmethod
    async def tail(self, ns: str, key: str, n: int) -> ListPage | None:
        """The last ``n`` items (``n`` ≥ 1) of a list, oldest first; None when the key is absent."""

    @abstractmethod
    async def items(self, ns: str, key: str, start: int, limit: int) -> ListPage | None:
        """Items ``start`` … ``start + limit - 1`` (from 0, the oldest present; fewer past the end);
        None when the key is absent."""

    @abstractmethod
    async def batch(self, ops: Sequence[BatchOp]) -> list[Any]:
        """Apply every op in order as one atomic step, or none of them. Each op acts as its call alone
        would, seeing the ops before it; the answers, one per op, are what those calls return (``delete``:
        its bool). When ``if_version`` fails for any op, nothing is written and ``VersionConflict`` is
        raised with ``conflicts``: ``[{"index", "ns", "key", "current_version"}]`` for every op that
        failed (an op whose check failed counts as not applied for the checks after it). Any other error
        is raised with ``index`` (of the op that caused it) in its details, nothing written."""

    @abstractmethod
    async def sweep(self, limit: int = 1000) -> int:
        """Turn up to ``limit`` expired keys into tombstones (freeing their values and items); how many.
        Only space: reads already treat an expired key as absent."""

    async def write_once(self, op: BatchOp, memo: Memo) -> Any:
        """``op`` applied once per ``memo``'s key, for a store with no platform records to keep its answer
        (``PlatformFacet.remember``): what the op's call returns, or the key's ``Remembered``. Redis keeps
        a record beside the op's keys; a store that cannot refuses."""
        raise no_records()


def no_records() -> InvalidRequest:
    return InvalidRequest(
        "idempotency_key needs a store that keeps records of writes: memory://, sqlite:///, postgresql:// or redis://"
    )


class SyncStateFacet(ABC):
    """``StateFacet``'s synchronous face: the same methods and promises, and the same one door for writes."""

    @abstractmethod
    def get(self, ns: str, key: str) -> Entry | None: ...
    @abstractmethod
    def write(self, op: BatchOp) -> Any: ...
    @abstractmethod
    def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]: ...
    @abstractmethod
    def drop(self, ns: str) -> None: ...
    @abstractmethod
    def records(self) -> Iterator[StateRecord]: ...
    @abstractmethod
    def restore(self, record: StateRecord) -> None: ...
    @abstractmethod
    def tail(self, ns: str, key: str, n: int) -> ListPage | None: ...
    @abstractmethod
    def items(self, ns: str, key: str, start: int, limit: int) -> ListPage | None: ...
    @abstractmethod
    def batch(self, ops: Sequence[BatchOp]) -> list[Any]: ...
    @abstractmethod
    def sweep(self, limit: int = 1000) -> int: ...

    def put(self, ns: str, key: str, data: bytes, if_version: int | None = None, ttl_ms: int | None = None) -> int:
        version: int = self.write(BatchOp("put", ns, key, data, if_version=if_version, ttl_ms=ttl_ms))
        return version

    def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        deleted: bool = self.write(BatchOp("delete", ns, key, if_version=if_version))
        return deleted

    def append(self, ns: str, key: str, items: Sequence[bytes], ttl_ms: int | None = None) -> tuple[int, int]:
        sized: tuple[int, int] = self.write(BatchOp("append", ns, key, items=items, ttl_ms=ttl_ms))
        return sized

    def trim(
        self, ns: str, key: str, keep_last: int, if_version: int | None = None, ttl_ms: int | None = None
    ) -> tuple[int, int]:
        op = BatchOp("trim", ns, key, keep_last=keep_last, if_version=if_version, ttl_ms=ttl_ms)
        sized: tuple[int, int] = self.write(op)
        return sized

    def pop(self, ns: str, key: str, if_version: int | None = None) -> tuple[bytes, int, int] | None:
        popped: tuple[bytes, int, int] | None = self.write(BatchOp("pop", ns, key, if_version=if_version))
        return popped

    def incr(
        self, ns: str, key: str, by: int, if_version: int | None = None, ttl_ms: int | None = None
    ) -> tuple[int, int]:
        counted: tuple[int, int] = self.write(BatchOp("incr", ns, key, by=by, if_version=if_version, ttl_ms=ttl_ms))
        return counted

    def update(
        self, ns: str, key: str, patcher: Patcher, if_version: int | None = None, ttl_ms: int | None = None
    ) -> tuple[bytes, int]:
        op = BatchOp("patch", ns, key, patcher=patcher, if_version=if_version, ttl_ms=ttl_ms)
        patched: tuple[bytes, int] = self.write(op)
        return patched

    def write_once(self, op: BatchOp, memo: Memo) -> Any:
        raise no_records()


# ---------------------------------------------------------------- platform


class EventSink(Protocol):
    """What a run event log's ``follow`` tells of new events: a server's waiters (``platform/waiters.py``)."""

    def wake(self, run_ids: Collection[str] | None) -> None:
        """These runs have new events (None: some runs may have, which cannot be said: every waiter looks)."""

    def following(self) -> None:
        """The log follows now: an event committed from here on reaches ``wake``."""

    async def watched(self) -> None:
        """Return once some stream waits for events (at once while one does)."""


class RunEventLog(ABC):
    """Each run's ordered, durable log of events (``PlatformFacet.events``).

    ``seq`` counts 1, 2, 3... per run, across its invocations, and is never used twice for a run, also
    after its events went with its session. The platform's own events (``records.STATUS_EVENT`` at
    every status change, ``records.OUTPUT_EVENT`` just before a ``done`` one) are written by the store
    in the same transaction as the change, whichever statement makes it (on the SQL stores, triggers on
    ``ks_runs``), so nothing can change a run's status without its event. Events commit in ``seq``
    order: a read sees a prefix of a run's log, never a gap. A run's events go with it (a purge) and
    with its session (``Database.delete_session``)."""

    @abstractmethod
    async def emit(
        self, invocation_id: str, token_hash: str, events: Sequence[NewEvent], now: int, cap: int
    ) -> Emitted | None:
        """Append a worker's ``events`` to its run's log in one atomic step, only while the invocation
        holds ``token_hash``, runs and its lease lasts at ``now`` (else None, nothing written): never
        after the event that ends the run. ``TooLarge``, nothing written, when the log would pass ``cap``
        events (the platform's own count too; they are never refused)."""

    @abstractmethod
    async def read(self, run_id: str, after: int, limit: int) -> list[StoredEvent]:
        """At most ``limit`` events of the run with ``seq`` above ``after``, in ``seq`` order."""

    @abstractmethod
    async def follow(self, sink: EventSink) -> None:
        """Tell ``sink`` which runs have new events, written by this process or any other sharing the
        store, until cancelled: ``sink.following()`` once in place (raising ``Unavailable`` if it cannot
        get there), then ``sink.wake`` for every later commit, never skipping one (after a lost
        connection, ``wake(None)``). A store that must poll polls only while ``sink.watched()`` says
        a stream waits, one cheap read for the whole process."""

    def written(self) -> None:
        """A hint that this process just committed a change that may have written events: a store that
        polls looks now instead of at its next tick. By default nothing."""
        return None


class PlatformFacet(ABC):
    """The platform's own records. Each method is one *guarded* operation decided atomically inside the
    store (one statement or one transaction), never a read followed by a separate write: that is what
    makes "one turn per session" and "one invocation to one worker" hold across any number of server
    processes sharing a store. Who may do what is ``keepstate.platform``'s, not the store's."""

    @property
    @abstractmethod
    def events(self) -> RunEventLog:
        """The runs' event logs, written in the same transactions as this facet's status changes."""

    # keys and environments
    @abstractmethod
    async def add_key(self, key: StoredKey, secret_hash: str) -> None:
        """Store a new key, creating its environment if needed."""

    @abstractmethod
    async def ensure_admin_key(self, key: StoredKey, secret_hash: str) -> None:
        """Make sure ``secret_hash`` is an unrevoked admin key of ``key.env`` (bootstrap)."""

    @abstractmethod
    async def key_by_hash(self, secret_hash: str) -> StoredKey | None: ...

    @abstractmethod
    async def list_keys(self, env: str) -> list[StoredKey]: ...

    @abstractmethod
    async def revoke_key(self, env: str, key_id: str, now: int) -> list[str] | None:
        """Revoke the key and, in the same atomic step, end what it holds: its running invocations
        become lost (their tokens refused from then on) and their runs interrupted. The ids of those
        runs, or None when the environment has no such unrevoked key. A claim by the key either comes
        wholly before (and is ended here) or is refused (``claim``'s guard)."""

    @abstractmethod
    async def has_keys(self) -> bool: ...

    @abstractmethod
    async def add_first_key(self, key: StoredKey, secret_hash: str) -> bool:
        """Store ``key`` only while the store has no unrevoked key, decided atomically (several
        servers may start on an empty store at once); True when it was stored."""

    # sessions
    @abstractmethod
    async def create_session(self, session: StoredSession) -> tuple[StoredSession, bool]:
        """Insert, or return the existing session of that id with False."""

    @abstractmethod
    async def bind_user(self, env: str, user: str, owner: str) -> str:
        """The member key that acts for end user ``user`` of ``env``: ``owner`` when it names the user
        first, else the key that did (kept). Atomic: two keys naming a new user at once get one answer."""

    @abstractmethod
    async def register_session(self, session: StoredSession, agent: str) -> tuple[StoredSession, bool]:
        """Record that ``agent`` keeps session-scope state in ``session`` without a run of it (an embedded
        store's app), creating the session unless one of its id exists — an existing one keeps its owner,
        user and metadata. Idempotent; one atomic step, also against ``Database.delete_session``: a
        delete comes wholly before (the session is made anew) or after (it drops the agent's state).
        The session as stored, and whether this call created it."""

    @abstractmethod
    async def add_session_agent(self, session: StoredSession, agent: str) -> bool:
        """Record that ``agent`` keeps session-scope state in ``session`` (a caller's write through
        ``/v0/sessions/{id}/state/{agent}``), only while that very session exists: the same id made
        again (another ``seq``) is another session. False when it is gone. Atomic against
        ``Database.delete_session``, which then drops the agent's state."""

    @abstractmethod
    async def get_session(self, env: str, session_id: str) -> StoredSession | None: ...

    @abstractmethod
    async def list_sessions(
        self, env: str, owner: str | None, user: str | None, after: int, limit: int, desc: bool = False
    ) -> list[StoredSession]:
        """At most ``limit`` sessions (``owner``, ``user``: None matches all) by ``seq``: oldest first
        above ``after``, or with ``desc`` newest first below it (``after`` 0: from the start)."""

    @abstractmethod
    async def session_agents(self, env: str, session_id: str) -> list[str]:
        """The agents of the session's runs and those registered in it (``register_session``), each once,
        in name order: what its session-scope state is kept under."""

    @abstractmethod
    async def update_session(
        self, env: str, session_id: str, owner: str | None, metadata: bytes
    ) -> StoredSession | None:
        """Replace a session's metadata when it exists and belongs to ``owner`` (None: any owner), in
        the same statement; the updated session, else None."""

    # runs
    @abstractmethod
    async def start_run(
        self, run: StoredRun, caller: str, invocation: StoredInvocation, multitask: str = "reject"
    ) -> tuple[StoredRun, bool]:
        """Insert a queued run and its start invocation; an idempotency hit returns the first run and False
        (whatever ``multitask`` says: nothing is interrupted twice). NotFound when the session is gone.

        ``multitask`` (``records.MULTITASK``) says what happens when a run of the session is queued or
        running: ``reject`` raises SessionBusy; ``enqueue`` inserts the run, which ``claim`` hands out
        only in its turn; ``interrupt`` cancels the session's queued runs and requests the cancel of its
        running ones in the same atomic step, then inserts the run. Held runs neither block nor are
        interrupted. Runs of the session queued past their ``queue_deadline`` (at ``run.created_at``)
        become ``expired`` first, in the same step, and do not block.
        """

    @abstractmethod
    async def get_run(self, env: str, run_id: str) -> StoredRun | None: ...

    @abstractmethod
    async def list_runs(self, query: RunFilter) -> list[StoredRun]:
        """At most ``query.limit`` runs matching its filters, in the order ``RunFilter`` says."""

    @abstractmethod
    async def decide(
        self, env: str, run_id: str, decision: bytes, invocation: StoredInvocation, now: int
    ) -> StoredRun | None:
        """held → queued with ``decision`` and a queued resume invocation; None when the run is not held.
        The run's new ``queue_deadline`` is the invocation's.

        Atomic against ``Database.delete_session`` of the run's session: a decision never queues a
        resume in a session that was deleted meanwhile (the delete cancels held runs)."""

    @abstractmethod
    async def cancel(self, env: str, run_id: str, now: int) -> StoredRun | None:
        """queued/held → cancelled; running → cancel_requested; other statuses unchanged. None if absent.
        A queued run past its deadline at ``now`` becomes ``expired`` instead (a final status: unchanged by cancel)."""

    # invocations
    @abstractmethod
    async def has_queued(self, env: str, agents: list[str], now: int) -> bool:
        """A cheap read: is there a queued invocation for one of ``agents`` whose deadline has not passed?"""

    @abstractmethod
    async def claim(
        self, env: str, agents: list[str], token_hash: str, lease_until: int, now: int, claimer: str
    ) -> Claimed | None:
        """Atomically move the oldest queued invocation of ``agents`` (and its run) to running, held by
        the key ``claimer``. The same guard skips invocations whose ``queue_deadline`` is before ``now``
        (never claimed), claims nothing once ``claimer`` is revoked (``revoke_key``), and skips a start
        while an invocation of its session queued before it is still queued or running (its turn has
        not come: one turn at a time per session, in start order, however many claim at once; an
        overdue one keeps its place until it is expired); a resume is never held back.
        ``has_queued`` applies the same filter (``sql.TURN_FREE``)."""

    @abstractmethod
    async def token_context(self, token_hash: str) -> RunContext | None:
        """The running invocation holding this token (the caller checks its lease), else None."""

    @abstractmethod
    async def token_lease(self, token_hash: str) -> int | None:
        """The lease end of the running invocation holding this token, else None.

        The cheap per-request validity check once the token's context is known (a context never
        changes for a token; whether it is still running does, from any server process)."""

    @abstractmethod
    async def heartbeat(self, invocation_id: str, token_hash: str, now: int, lease_until: int) -> bool | None:
        """Extend a live lease; return the run's cancel_requested, or None when the token is dead."""

    @abstractmethod
    async def finish(self, invocation_id: str, token_hash: str, outcome: Outcome, now: int) -> StoredRun | None:
        """End a live invocation and move its run on; None when the token is dead."""

    @abstractmethod
    async def expire(self, now: int) -> int:
        """Running invocations whose lease ran out become lost, their runs interrupted; return how many."""

    @abstractmethod
    async def expire_queued(self, now: int) -> int:
        """Queued runs whose ``queue_deadline`` is before ``now`` become ``expired``, with their queued
        invocations, in one guarded step that any number of servers may run at once (each run is
        expired by exactly one of them); return how many this call expired."""

    # agents, retention
    @abstractmethod
    async def touch_agents(self, env: str, agents: list[str], now: int) -> None:
        """Record that a worker claimed for ``agents`` at ``now`` (a later time is never overwritten)."""

    @abstractmethod
    async def agent_stats(self, env: str | None) -> list[AgentStats]:
        """Every agent of ``env`` (None: of every environment) that a worker claimed for or that has runs:
        its last claim, its run counts by status and its oldest queued invocation, read together."""

    @abstractmethod
    async def purge_runs(self, before: int, limit: int) -> int:
        """Delete at most ``limit`` finished runs (a status of ``records.FINAL``) last updated before
        ``before`` (ms), the oldest first, with their invocations, in one short transaction; return how many runs went.
        Never a queued, running or held run, never state. Safe while servers serve, and in parallel."""

    @abstractmethod
    async def count_purgeable(self, before: int) -> int:
        """How many runs ``purge_runs(before, ...)`` would delete in all (a dry run)."""

    # idempotent writes (``remembered.py``)
    @abstractmethod
    async def recall(self, caller: str, key: str) -> Remembered | None:
        """The answer ``caller``'s ``key`` holds, if a write with it finished (committed or refused); as
        kept, which may be a store's raw result: ``rendered`` makes it the answer of a repeat."""

    def rendered(self, memo: Memo, found: Remembered) -> Remembered:
        """``found`` (``recall``'s) as the answer to ``memo``'s request: a raw result a store kept in place of
        the answer (PostgreSQL's one-statement writes) rendered by ``memo``; anything else as it is."""
        return found

    @abstractmethod
    async def remember(self, memo: Memo, work: Callable[[], Awaitable[T]]) -> T | Remembered:
        """Run ``work`` (one write through this store's facets) so that its effect and ``memo``'s answer
        commit in one atomic step; or, when the key already holds an answer, write nothing and return
        that. ``IdempotencyInFlight`` when the key's first write is still running after ``IN_FLIGHT_S``."""

    @abstractmethod
    async def keep(self, memo: Memo, answer: Answer, now: int) -> None:
        """Remember the answer of a write that was refused (it wrote nothing), unless the key has one."""

    @abstractmethod
    async def purge_remembered(self, before: int, limit: int) -> int:
        """Forget at most ``limit`` answers remembered before ``before`` (ms), the oldest first."""

    @abstractmethod
    async def count_remembered(self, before: int) -> int:
        """How many answers ``purge_remembered(before, ...)`` would forget in all (a dry run)."""

    # export and import (rows as ``dump.py`` moves them)
    @abstractmethod
    async def dump(self, table: str) -> list[dict[str, Any]]:
        """Every row of one of ``dump.TABLES``, as column → value."""

    @abstractmethod
    async def load(self, table: str, rows: list[dict[str, Any]]) -> int:
        """Insert rows as exported, keeping rows the store already has; return how many were new."""


# ---------------------------------------------------------------- leases


LEASE_SPACES = ("sessions", "tokens")
"""The spaces of a store's leases and blobs: session state, and retained credentials kept apart."""


class LeaseFacet(ABC):
    """Per-session leases whose tokens are fencing counters (each grant a larger one), and fenced blobs.

    ``token=None`` on a write means unfenced (a plain write). A fenced write returns False (``write``:
    None), writing nothing, when the token is no longer the session's current one, checked by the
    store in the same atomic step as the write. A blob's version is 1 on its first write and grows by
    one per ``write`` (``touch`` keeps it; a removed blob starts again at 1). Every method raises
    ``Unavailable`` when the store cannot be reached, and nothing else from the driver.
    """

    poll_first = 0.01
    """Seconds a waiter sleeps before its first retry; doubled up to ``poll_max``."""
    poll_max = 0.2
    expires_itself = False
    """True when the store deletes a blob the moment it expires (Redis): nothing is left to purge, and
    an expired blob is never read back."""

    @abstractmethod
    async def acquire(self, id: str, ttl_ms: int) -> int | None:
        """Grant the lease when free or expired: the new (larger) token, else None."""

    async def acquire_waiting(
        self, id: str, ttl_ms: int, wait_s: float, pause: Callable[[float], Awaitable[object]] = asyncio.sleep
    ) -> int | None:
        """``acquire``, tried again until granted or ``wait_s`` has passed (then None); at least once.

        Between tries a jittered back-off from ``poll_first`` doubling to ``poll_max``, spent in
        ``pause(seconds)``, which may end early (the server's ends when it sees the lease released)."""
        give_up = time.monotonic() + wait_s
        delay = self.poll_first
        while True:
            token = await self.acquire(id, ttl_ms)
            if token is not None:
                return token
            left = give_up - time.monotonic()
            if left <= 0:
                return None
            await pause(min(left, delay * random.uniform(0.5, 1.0)))
            delay = min(delay * 2, self.poll_max)

    @abstractmethod
    async def renew(self, id: str, token: int, ttl_ms: int) -> bool:
        """Extend the lease by ``ttl_ms`` when ``token`` is still current; False when it is not."""

    @abstractmethod
    async def release(self, id: str, token: int) -> None:
        """Free the lease when ``token`` is still current (the counter is kept)."""

    @abstractmethod
    async def read(self, id: str) -> Blob | None:
        """The stored blob with its version, or None when absent (expired blobs are returned: callers
        check)."""

    @abstractmethod
    async def write(self, id: str, stored: Blob, token: int | None) -> int | None:
        """Replace the blob (``stored.version`` is ignored); its new version, or None when the fence
        refused the write. Fenced when ``token`` is given."""

    @abstractmethod
    async def remove(self, id: str, token: int | None) -> bool:
        """Delete the blob (absent is fine); fenced when ``token`` is given."""

    @abstractmethod
    async def touch(self, id: str, expires_at: int, token: int | None) -> bool:
        """Set the blob's expiry when it exists; fenced when ``token`` is given."""

    @abstractmethod
    def records(self) -> AsyncIterator[BlobRecord]:
        """Every blob of this space, in id order, for export."""

    @abstractmethod
    async def restore(self, record: BlobRecord) -> None:
        """Write a blob exactly as exported (its version included), unfenced, for import."""

    @abstractmethod
    async def purge(self, before: int, limit: int) -> int:
        """Delete up to ``limit`` blobs of this space that expired before ``before`` (ms) and are not
        pinned, and (space ``sessions``) up to ``limit`` lease rows free since before it whose blobs are
        gone from every space; how many records went. A store that expires blobs by itself (Redis) has
        nothing to purge: 0."""

    @abstractmethod
    async def count_purgeable(self, before: int) -> int:
        """How many records ``purge(before, ...)`` would delete in all (a dry run)."""


async def blob_records(
    page: Callable[[str], Awaitable[Sequence[Row]]], blob: Callable[[Row], Blob], size: int
) -> AsyncIterator[BlobRecord]:
    """Every blob of a lease space read a page at a time: ``page(after)`` gives up to ``size`` rows
    ``(id, ...)`` of ids above ``after`` in id order, ``blob`` makes a row's rest into its ``Blob``."""
    after = ""
    while True:
        rows = await page(after)
        for row in rows:
            yield BlobRecord(row[0], blob(row[1:]))
        if len(rows) < size:
            return
        after = rows[-1][0]


# ---------------------------------------------------------------- harness


Pending = tuple[str | None, bytes, int | None]
"""A log entry on its way in: its id (None: none), its JSON bytes, its creation time (None: now)."""
EntryRow = tuple[int, str | None, bytes, int]
"""A log entry read back whole: position, id, JSON bytes, creation time."""


class HarnessFacet(Protocol):
    """The harness store's storage, synchronous. Rows carry JSON as text or bytes, as written.

    Each method is atomic on its own and joins this thread's open ``transaction()``. Guards live in
    the writing statements (``UPDATE … WHERE status = …``, ``INSERT … ON CONFLICT``), so they hold when
    several processes race; a log's writers queue on the log's head row.
    """

    def transaction(self) -> AbstractContextManager[None]:
        """Group this thread's writes: they commit together or not at all (nested: savepoints)."""

    def create_session(self, id: str, parent: str | None, state: str, created_at: int, now: int) -> Row:
        """Insert, or the existing row: ``(id, parent, state, created_at, updated_at)``."""

    def session(self, id: str) -> Row | None: ...
    def sessions(self) -> list[Row]: ...
    def set_session_state(self, id: str, state: str, now: int) -> bool: ...
    def delete_session(self, id: str) -> bool: ...

    def enqueue(self, session: str, id: str, input: str, meta: str, now: int) -> tuple[Row, bool]:
        """Insert a queued operation unless ``(session, id)`` exists: ``(row, inserted)``; rows are
        ``(session, id, seq, status, input, meta, result, reason, created_at, settled_at)``."""

    def operation(self, session: str, id: str) -> Row | None: ...
    def operations(self, session: str | None, statuses: Sequence[str] | None) -> list[Row]: ...
    def transition(self, session: str, id: str, source: str, target: str) -> bool: ...
    def settle(self, session: str, id: str, status: str, result: str, reason: str | None, now: int) -> bool: ...
    def delete_operation(self, session: str, id: str) -> bool: ...
    def delete_settled(self, session: str) -> int: ...
    def set_operation_meta(self, session: str, id: str, meta: str) -> bool: ...

    def append(self, session: str, log: str, pending: Sequence[Pending], now: int) -> int:
        """Write entries in order, atomically (an id already in the log replaces its entry in place);
        the position of the last one written."""

    def read(self, session: str, log: str, after: int, limit: int | None) -> list[EntryRow]: ...
    def entry(self, session: str, log: str, id: str) -> EntryRow | None: ...
    def end(self, session: str, log: str) -> int: ...
    def clear(self, session: str, log: str) -> None: ...
    def copy(self, source: str, target: str, log: str, now: int) -> None: ...


# ---------------------------------------------------------------- documents (memory)


class DocumentsFacet(ABC):
    """Documents by ``(space, path)`` with versions, and full-text search, asynchronous face.

    Versions work as the state facet's: 1 on the first write, +1 per write, never repeating for a
    path, also after a delete (a tombstone keeps the last version); ``if_version`` 0 means "only if
    absent" and a mismatch raises VersionConflict(current_version). Every listing and search is
    limited by a ``PathFilter`` inside the backend's one statement; paths compare byte by byte.
    """

    @abstractmethod
    async def read(self, space: str, path: str) -> StoredDocument | None:
        """The live document, or None when absent or deleted."""

    @abstractmethod
    async def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int:
        """Replace the document's text and metadata; the new version. TooLarge when the engine cannot
        index the text."""

    @abstractmethod
    async def delete(self, space: str, path: str, if_version: int | None) -> bool:
        """Delete; True when a live document was deleted. VersionConflict on a mismatch."""

    @abstractmethod
    async def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]:
        """Live documents that ``where`` admits, in path order, paths ``> after``, at most ``limit``."""

    @abstractmethod
    async def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]:
        """Live documents that ``where`` admits holding every term of ``query``, best first (ties in
        path order), at most ``limit``; a match in the first line ranks above one in the rest."""

    @abstractmethod
    def records(self) -> AsyncIterator[DocumentRecord]:
        """Every document of every space, tombstones included, in (space, path) order, for export."""

    @abstractmethod
    async def restore(self, record: DocumentRecord) -> None:
        """Write a record exactly as exported (version, tombstone, ``updated_at``), for import."""

    # Semantic search. A document's passages are those of one version and one embedder (``key``:
    # ``Embedder.key``); any write or delete of the document drops them in the same transaction.

    @abstractmethod
    async def nearest(
        self, space: str, key: str, vector: array[float], where: PathFilter, limit: int
    ) -> list[StoredHit]:
        """Live documents embedded with ``key`` that ``where`` admits, nearest ``vector`` (a unit vector)
        first by their nearest passage, at most ``limit``; ``score`` the cosine similarity, ``snippet``
        that passage. Exact on small memories; an index may make it approximate on large ones."""

    @abstractmethod
    async def write_embedded(self, written: DocumentWrite, key: str, passages: Sequence[StoredPassage]) -> int:
        """``write`` and ``attach`` of the new version in one transaction (one commit): a write whose
        passages were embedded before it."""

    @abstractmethod
    async def attach(self, space: str, path: str, version: int, key: str, passages: Sequence[StoredPassage]) -> bool:
        """Record ``passages`` as those of version ``version`` of the document, embedded with ``key``
        (replacing any); False, writing nothing, when the document is deleted or at another version."""

    @abstractmethod
    async def unembedded(
        self, key: str | None, space: str | None, after: tuple[str, str], limit: int
    ) -> list[Unembedded]:
        """Live documents after ``(space, path)``, in that order, at most ``limit``: with ``key`` None those
        never embedded, else those not embedded with ``key``; of one ``space``, or of every one (None)."""

    @abstractmethod
    async def embedding_counts(self, key: str, space: str | None) -> tuple[int, int]:
        """How many live documents (of ``space``, or of every one) are embedded with ``key``, and in all."""


class SyncDocumentsFacet(Protocol):
    """``DocumentsFacet``'s synchronous face: the same methods and promises."""

    def read(self, space: str, path: str) -> StoredDocument | None: ...
    def write(self, space: str, path: str, text: str, metadata: bytes, if_version: int | None, now: int) -> int: ...
    def delete(self, space: str, path: str, if_version: int | None) -> bool: ...
    def listing(self, space: str, where: PathFilter, after: str, limit: int) -> list[DocumentHead]: ...
    def search(self, space: str, query: Query, where: PathFilter, limit: int) -> list[StoredHit]: ...
    def records(self) -> Iterator[DocumentRecord]: ...
    def restore(self, record: DocumentRecord) -> None: ...
    def nearest(self, space: str, key: str, vector: array[float], where: PathFilter, limit: int) -> list[StoredHit]: ...
    def write_embedded(self, written: DocumentWrite, key: str, passages: Sequence[StoredPassage]) -> int: ...
    def attach(self, space: str, path: str, version: int, key: str, passages: Sequence[StoredPassage]) -> bool: ...
    def unembedded(
        self, key: str | None, space: str | None, after: tuple[str, str], limit: int
    ) -> list[Unembedded]: ...
    def embedding_counts(self, key: str, space: str | None) -> tuple[int, int]: ...


# ---------------------------------------------------------------- the database


class Database(ABC):
    """One store as this process sees it. Open it with ``stores.open_database(url)``; close it once.

    Facets are made on first use (schema migrated then) and shared by everything that uses this
    Database; heavy resources (a SQLite file's writer thread, a PostgreSQL pool) are shared by every
    Database of the same URL in the process.
    """

    url: str
    capabilities: Capabilities
    loop_bound: bool = False
    """True when the async facets belong to the event loop of their first use (a pool or client made
    there): code on another loop needs a Database of its own (``keepstate.Store.async_state``)."""

    @classmethod
    def preflight(cls, url: str, must_exist: bool) -> None:
        """Check ``url`` without opening or creating anything (``stores.preflight``); by default the
        open itself is the check."""
        return None

    @classmethod
    def backup(cls, url: str, target: str, replace: bool) -> BackupReport:
        """Copy the live store at ``url`` into the file ``target`` and check the copy
        (``capabilities.file_backup``); InvalidRequest for a target that is the store or part of it."""
        cls.capabilities.require("file_backup", url)
        raise AssertionError("unreachable: a store declaring a file backup implements it")

    @abstractmethod
    async def state(self) -> StateFacet:
        """The state facet, asynchronous."""

    @abstractmethod
    def sync_state(self) -> SyncStateFacet:
        """The state facet, synchronous (the embedded store)."""

    async def platform(self) -> PlatformFacet:
        """The platform facet (``capabilities.platform``)."""
        self.capabilities.require("platform", self.url)
        raise AssertionError("unreachable: a store declaring a platform implements it")

    async def leases(self, space: str) -> LeaseFacet:
        """The lease facet of ``space`` (``sessions`` or ``tokens``: kept apart)."""
        self.capabilities.require("leases", self.url)
        raise AssertionError("unreachable: a store declaring leases implements them")

    def harness(self, prefix: str, chunk_size: int) -> HarnessFacet:
        """The harness facet of one table prefix (``capabilities.harness``)."""
        self.capabilities.require("harness", self.url)
        raise AssertionError("unreachable: a store declaring a harness implements it")

    async def documents(self) -> DocumentsFacet:
        """The documents facet, asynchronous (``capabilities.documents``)."""
        self.capabilities.require("documents", self.url)
        raise AssertionError("unreachable: a store declaring documents implements them")

    def sync_documents(self) -> SyncDocumentsFacet:
        """The documents facet, synchronous (the embedded store)."""
        self.capabilities.require("documents", self.url)
        raise AssertionError("unreachable: a store declaring documents implements them")

    remembers_sync: bool = False
    """Whether ``remember_sync`` runs here; else the embedded store's sync calls run the async
    ``PlatformFacet.remember`` on its loop thread."""

    def remember_sync(self, memo: Memo, work: Callable[[], T]) -> T | Remembered:
        """``PlatformFacet.remember`` for a write of the sync face (``sync_state``), on the caller's thread."""
        raise NotImplementedError(f"{type(self).__name__} remembers writes on its async face only")

    async def read_with_lease(self, token_hash: str, ns: str, key: str) -> LeaseAndEntry:
        """A run token's lease end and a state value, for a run's state GET. A store whose platform and
        state share one database reads both in one statement (one snapshot, one round trip); this
        default asks each facet in turn."""
        platform, state = await self.platform(), await self.state()
        return await platform.token_lease(token_hash), await state.get(ns, key)

    @abstractmethod
    async def delete_session(self, env: str, session_id: str, now: int) -> list[str] | None:
        """Delete a session unless a run of it is queued or running (SessionBusy), and in the same atomic
        step cancel its held runs, forget its registered agents and drop its session-scope state of
        every agent that ran or was registered in it (``PlatformFacet.session_agents``), so an id
        created again later starts empty. The agents, or None when there is no such session."""

    @abstractmethod
    async def fork_session(
        self, source: StoredSession, fork: StoredSession, cuts: Cuts
    ) -> tuple[StoredSession, bool] | None:
        """Make ``fork`` (its ``parent`` is ``source.id``) a copy of ``source`` in one atomic step: its row,
        the source's agents recorded in it, and every one's session-scope state copied as of one instant
        (each key with its value, version and expiry; the fork's namespaces emptied first, and a version
        kept above any the fork's id held before, so versions never repeat). Each list ``cuts`` names is
        cut to its first items there, as one more write (version + 1, expiry kept, the list stored whole
        until its next append); an absent key stays absent; NotAList, nothing written at all, for a key
        holding another value. The source is only read. ``(session, True)``; ``(existing, False)``, nothing
        copied, when a session of ``fork.id`` exists; None, nothing written, when ``source`` is gone (its
        id made again is another session: ``StoredSession.made``)."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise Unavailable when the store cannot be reached."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release this Database (from async code); shared resources close with their last user."""

    @abstractmethod
    def close(self) -> None:
        """Release this Database (from sync code)."""
