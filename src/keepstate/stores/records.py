"""The records the storage facets read and write: plain frozen dataclasses, free of I/O.

State entries are canonical JSON bytes with a version. The platform's records (keys, sessions,
runs, invocations) keep their JSON payloads (run input, output, error, hold request, decision,
session metadata) as canonical JSON bytes too, validated on the way in by ``keepstate.values``, so
stores never parse them and answers embed them as they are (``public()``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from ..errors import InvalidRequest, TooLarge
from ..values import MAX_VERSION

SCOPE_KINDS = ("run", "session", "agent", "user")
ROLES = ("admin", "member", "worker")
RUN_STATUSES = ("queued", "running", "done", "failed", "held", "interrupted", "cancelled", "expired")
ACTIVE = ("queued", "running")
"""A run in one of these blocks its session (a queued one only until its queue deadline passes)."""
FINAL = ("done", "failed", "interrupted", "cancelled", "expired")
"""A run in one of these never changes again: what a purge may delete. ``held`` is not final (a decision resumes it)."""
MULTITASK = ("reject", "enqueue", "interrupt")
"""What starting a run does when its session has a run queued or running (``PlatformFacet.start_run``): refuse
(SessionBusy), queue it behind them, or cancel them (the queued ones now, the running one by request) and queue it."""
DEFAULT_QUEUE_TIMEOUT_MS = 600_000
"""How long a run (or a resume) may stay queued before it expires, unless its start or the server says otherwise."""
NULL = b"null"


VERSION_LIMIT = "version_limit"
"""The word each backend's guard uses for a write that would take a key or a document past
``values.MAX_VERSION`` (SQLite's trigger, PostgreSQL's check constraint, Redis's scripts)."""


def version_limit() -> InvalidRequest:
    """The refusal of a write past ``values.MAX_VERSION``: nothing is written."""
    return InvalidRequest(
        f"this key (or document) is at version {MAX_VERSION}, the highest one may reach: it takes no more writes"
    )


def namespace(env: str, kind: str, agent: str, id: str = "") -> str:
    """The namespace of one state scope; every part is key-charset, so ``/`` cannot collide."""
    return f"{env}/{kind}/{agent}/{id}"


CONSOLE_SESSIONS = namespace("keepstate", "console", "sessions")
"""Where the web console keeps its sign-ins: its kind is no scope's, so no State API route names it."""


def prefix_end(prefix: str) -> str:
    """The smallest string above every key that starts with ``prefix`` (keys are ASCII)."""
    return prefix + "\x7f"


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What a backup copied: the copy's path and size, its pages, and the schema version of each component."""

    path: str
    bytes: int
    pages: int
    schema: dict[str, int]


# ---------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored value: canonical JSON bytes, its version, and when it expires (ms; None: never)."""

    data: bytes
    version: int
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class StateRecord:
    """One key as export/import moves it; ``data`` is None for a tombstone (deleted or expired key)."""

    ns: str
    key: str
    version: int
    data: bytes | None
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class ListPage:
    """Part of a list: its items (canonical JSON bytes each), and the whole list's version and length."""

    items: list[bytes]
    version: int
    length: int


Patcher = Callable[[bytes | None], bytes]
"""A store-side rewrite of one value: canonical JSON of the current value (None: absent) to the new one.
Pure and quick (the store calls it inside its atomic step, possibly more than once); it may raise a
``KeepstateError`` (TooLarge, InvalidValue), which the store passes on, writing nothing."""

BATCH_OPS = ("put", "delete", "append", "incr", "patch", "trim")
WRITES = (*BATCH_OPS, "pop")
"""What ``StateFacet.write`` takes: every batch op, and ``pop`` (which no batch takes)."""


def unknown_write(op: BatchOp) -> InvalidRequest:
    """A facet's refusal of an op kind it has no write for (``lone_op`` refuses them before)."""
    return InvalidRequest(f"a state write is one of {', '.join(WRITES)}, got {op.op!r:.40}")


@dataclass(slots=True)
class BatchOp:
    """One write of one key as a value, what the state facets take: alone (``StateFacet.write``) or in an
    atomic batch (``batch``), with the arguments of that write (unused ones left default). Not frozen:
    every write makes one, and a frozen dataclass costs a microsecond more to make."""

    op: str
    ns: str
    key: str
    data: bytes = b"null"
    """``put``: the value."""
    items: Sequence[bytes] = ()
    """``append``: the encoded items."""
    by: int = 0
    """``incr``: the step."""
    patcher: Patcher | None = None
    """``patch``: the rewrite."""
    keep_last: int = 0
    """``trim``: how many items remain at most."""
    if_version: int | None = None
    ttl_ms: int | None = None


# ---------------------------------------------------------------- leases (the session store)


@dataclass(frozen=True, slots=True)
class Blob:
    """A session store blob: its bytes, its expiry (ms, None = none), whether expiry is suspended, and
    its version as read (1 on its first write, +1 per write; ignored on the way in)."""

    data: bytes
    expires_at: int | None
    pinned: bool = False
    version: int = 0

    def live(self, at_ms: int) -> bool:
        return self.pinned or self.expires_at is None or self.expires_at > at_ms


@dataclass(frozen=True, slots=True)
class BlobRecord:
    """One stored blob of a lease space as export/import moves it (leases and fences stay behind: a
    fence only needs to grow, which a new lease row's clock-seeded fence does on any store)."""

    id: str
    blob: Blob


# ---------------------------------------------------------------- platform


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a valid run token stands for: its invocation and the run's coordinates."""

    invocation_id: str
    run_id: str
    env: str
    agent: str
    session_id: str | None
    user: str | None
    owner: str
    lease_until: int


@dataclass(frozen=True, slots=True)
class StoredKey:
    id: str
    env: str
    role: str
    name: str | None
    created_at: int
    revoked: bool = False

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role, "name": self.name, "created_at": self.created_at}


@dataclass(frozen=True, slots=True)
class StoredSession:
    env: str
    id: str
    owner: str
    user: str | None
    metadata: bytes
    created_at: int
    seq: int = 0
    parent: str | None = None
    """The session this one was forked from (``Database.fork_session``); None when not forked."""

    @property
    def made(self) -> tuple[int, int, str]:
        """What tells this session from one made again with its id: SQLite may give the new one the
        deleted one's ``seq`` (a reused rowid), not its creation time and owner as well."""
        return self.seq, self.created_at, self.owner

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "owner": self.owner,
            "user": self.user,
            "metadata": orjson.Fragment(self.metadata),
            "created_at": self.created_at,
            "parent": self.parent,
        }


@dataclass(frozen=True, slots=True)
class StoredRun:
    env: str
    id: str
    agent: str
    owner: str
    session_id: str | None
    user: str | None
    parent_id: str | None
    status: str
    input: bytes
    created_at: int
    updated_at: int
    output: bytes = NULL
    error: bytes = NULL
    hold: bytes = NULL
    decision: bytes = NULL
    cancel_requested: bool = False
    idempotency_key: str | None = None
    seq: int = 0
    queue_timeout: int = DEFAULT_QUEUE_TIMEOUT_MS
    """Milliseconds its start (and each resume) may stay queued before the run expires."""
    queue_deadline: int | None = None
    """While queued: when it expires (ms). None once a worker took it, and for runs queued without one."""

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agent": self.agent,
            "session_id": self.session_id,
            "user": self.user,
            "parent_id": self.parent_id,
            "status": self.status,
            "input": orjson.Fragment(self.input),
            "output": orjson.Fragment(self.output),
            "error": orjson.Fragment(self.error),
            "hold": orjson.Fragment(self.hold),
            "decision": orjson.Fragment(self.decision),
            "cancel_requested": self.cancel_requested,
            "queue_deadline": self.queue_deadline,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def with_(self, **changes: Any) -> StoredRun:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class StoredInvocation:
    """One execution of a run: its start, or a resume after a decision."""

    id: str
    env: str
    run_id: str
    agent: str
    kind: str
    status: str
    created_at: int
    lease_until: int = 0
    token_hash: str | None = None
    seq: int = 0
    queue_deadline: int | None = None
    """When a queued invocation expires unclaimed (ms): its run's ``queue_deadline``."""
    claimed_by: str | None = None
    """The key that claimed it (None while queued): revoking that key ends the invocation."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """A claim's answer: the invocation and its run, as they are after the claim."""

    invocation: StoredInvocation
    run: StoredRun
    token: str = ""
    lease_seconds: float = 0.0

    def public(self) -> dict[str, Any]:
        run = self.run
        return {
            "id": self.invocation.id,
            "run_id": run.id,
            "agent": run.agent,
            "kind": self.invocation.kind,
            "input": orjson.Fragment(run.input),
            "decision": orjson.Fragment(run.decision),
            "session_id": run.session_id,
            "user": run.user,
            "parent_id": run.parent_id,
            "token": self.token,
            "lease_seconds": self.lease_seconds,
        }


@dataclass(frozen=True, slots=True)
class AgentStats:
    """One agent of one environment as the operator sees it: when a worker last claimed for it (None:
    never) and how many of its runs are in each status (statuses without runs are absent)."""

    env: str
    agent: str
    last_claim_at: int | None
    runs: dict[str, int]
    oldest_queued_at: int | None
    """When its oldest queued invocation (a start or a resume) was queued; None when none is."""

    def count(self, status: str) -> int:
        return self.runs.get(status, 0)

    def public(self) -> dict[str, Any]:
        return {
            "name": self.agent,
            "last_claim_at": self.last_claim_at,
            "queued": self.count("queued"),
            "running": self.count("running"),
            "held": self.count("held"),
        }


def agent_stats(
    counts: Iterable[tuple[str, str, str, int]],
    claims: Iterable[tuple[str, str, int]],
    oldest: Iterable[tuple[str, str, int]],
) -> list[AgentStats]:
    """Merge what a store read (``(env, agent, status, count)``, ``(env, agent, last_claim_at)``,
    ``(env, agent, oldest queued_at)``) into one record per agent, ordered by environment and name."""
    runs: dict[tuple[str, str], dict[str, int]] = {}
    for env, agent, status, count in counts:
        runs.setdefault((env, agent), {})[status] = int(count)
    last = {(env, agent): int(at) for env, agent, at in claims}
    first = {(env, agent): int(at) for env, agent, at in oldest}
    names = sorted(runs.keys() | last.keys())
    return [
        AgentStats(env, agent, last.get((env, agent)), runs.get((env, agent), {}), first.get((env, agent)))
        for env, agent in names
    ]


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a list returns: ``owner`` None means every owner (an admin); None filters match all.

    Oldest first past ``after`` (a ``seq``; 0: from the start), or with ``desc`` newest first below it."""

    env: str
    owner: str | None
    session_id: str | None
    status: str | None
    after: int
    limit: int
    agent: str | None = None
    parent_id: str | None = None
    desc: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an invocation ends: ``complete`` (output), ``fail`` (error) or ``hold`` (request)."""

    kind: str
    data: bytes


FINISHED = {"complete": "done", "fail": "failed", "hold": "held"}
"""The run status each outcome leads to, unless a cancel was requested (then ``cancelled``, except complete)."""


def finished_status(outcome: str, cancel_requested: bool) -> str:
    if cancel_requested and outcome != "complete":
        return "cancelled"
    return FINISHED[outcome]


STATUS_EVENT, OUTPUT_EVENT = "run.status", "run.output"
"""The events the platform writes into a run's log: ``{status}`` at each status change, and ``{output}``
just before the ``done`` one. Workers may not write types starting ``run.``."""
NewEvent = tuple[str, bytes]
"""An event on its way into a run's log: its type and its data as canonical JSON."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event of a run's log: ``seq`` counts 1, 2, 3... per run, across its invocations."""

    seq: int
    type: str
    data: bytes
    at: int

    def public(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "data": orjson.Fragment(self.data), "at": self.at}

    @property
    def ends(self) -> bool:
        """Whether this event gives its run a final status: nothing comes after it."""
        return self.type == STATUS_EVENT and orjson.loads(self.data).get("status") in FINAL


@dataclass(frozen=True, slots=True)
class Emitted:
    """A worker's emit, written: the ``seq`` of its last event and the run's ``cancel_requested``."""

    seq: int
    cancel_requested: bool


def check_event_cap(last: int, adding: int, cap: int) -> None:
    """TooLarge when ``adding`` events after the ``last`` a run's log holds would take it past ``cap``."""
    if last + adding > cap:
        raise TooLarge(f"a run's log holds at most {cap} events: it has {last}, and {adding} more would pass that")
