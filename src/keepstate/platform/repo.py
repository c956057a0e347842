"""The contract of the platform's own records (keys, sessions, runs, invocations).

Each method is one *guarded* operation, decided atomically inside the store (one statement or one
transaction), never a read followed by a separate write: that is what makes "one turn per
session" and "one invocation to one worker" hold across any number of server processes sharing
a store. Rules that need no atomicity (who may see what, validation) live in ``service.py``.

Implementations: ``memory_repo.MemoryRepo`` (one process) and ``sqlite_repo.SqliteRepo``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..stores.base import Backend, Entry
from .models import Claimed, Invocation, KeyRecord, Run, RunContext, Session

LeaseAndEntry = tuple[int | None, Entry | None]
"""A run token's lease end (None: not running) and a state entry (None: absent), read together."""


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a list returns: ``owner`` None means every owner (an admin)."""

    env: str
    owner: str | None
    session_id: str | None
    status: str | None
    after: int
    limit: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an invocation ends: ``complete`` (output), ``fail`` (error) or ``hold`` (request)."""

    kind: str
    data: bytes


class PlatformRepo(ABC):
    # keys and environments
    @abstractmethod
    async def add_key(self, key: KeyRecord, secret_hash: str) -> None:
        """Store a new key, creating its environment if needed."""

    @abstractmethod
    async def ensure_admin_key(self, key: KeyRecord, secret_hash: str) -> None:
        """Make sure ``secret_hash`` is an unrevoked admin key of ``key.env`` (bootstrap)."""

    @abstractmethod
    async def key_by_hash(self, secret_hash: str) -> KeyRecord | None: ...

    @abstractmethod
    async def list_keys(self, env: str) -> list[KeyRecord]: ...

    @abstractmethod
    async def revoke_key(self, env: str, key_id: str) -> bool: ...

    @abstractmethod
    async def has_keys(self) -> bool: ...

    @abstractmethod
    async def add_first_key(self, key: KeyRecord, secret_hash: str) -> bool:
        """Store ``key`` only while the store has no unrevoked key, decided atomically (several
        servers may start on an empty store at once); True when it was stored."""

    # sessions
    @abstractmethod
    async def create_session(self, session: Session) -> tuple[Session, bool]:
        """Insert, or return the existing session of that id with False."""

    @abstractmethod
    async def get_session(self, env: str, session_id: str) -> Session | None: ...

    @abstractmethod
    async def list_sessions(
        self, env: str, owner: str | None, user: str | None, after: int, limit: int
    ) -> list[Session]: ...

    @abstractmethod
    async def delete_session(self, env: str, session_id: str, now: int) -> list[str] | None:
        """Delete unless a run of it is active (SessionBusy), cancelling its held runs in the same step;
        return the agents of its runs, None if absent."""

    # runs
    @abstractmethod
    async def start_run(self, run: Run, caller: str, invocation: Invocation) -> tuple[Run, bool]:
        """Insert a queued run and its start invocation; an idempotency hit returns the first run and False.

        Raises SessionBusy when a run of the session is queued or running, NotFound when the session is gone.
        """

    @abstractmethod
    async def get_run(self, env: str, run_id: str) -> Run | None: ...

    @abstractmethod
    async def list_runs(self, query: RunFilter) -> list[Run]: ...

    @abstractmethod
    async def decide(self, env: str, run_id: str, decision: bytes, invocation: Invocation, now: int) -> Run | None:
        """held → queued with ``decision`` and a queued resume invocation; None when the run is not held.

        Atomic against ``delete_session`` of the run's session: a decision never queues a resume in a
        session that was deleted meanwhile (the delete cancels held runs)."""

    @abstractmethod
    async def cancel(self, env: str, run_id: str, now: int) -> Run | None:
        """queued/held → cancelled; running → cancel_requested; other statuses unchanged. None if absent."""

    # invocations
    @abstractmethod
    async def has_queued(self, env: str, agents: list[str]) -> bool:
        """A cheap read: is there a queued invocation for one of ``agents``?"""

    @abstractmethod
    async def claim(self, env: str, agents: list[str], token_hash: str, lease_until: int, now: int) -> Claimed | None:
        """Atomically move the oldest queued invocation of ``agents`` (and its run) to running."""

    @abstractmethod
    async def token_context(self, token_hash: str) -> RunContext | None:
        """The running invocation holding this token (the caller checks its lease), else None."""

    @abstractmethod
    async def token_lease(self, token_hash: str) -> int | None:
        """The lease end of the running invocation holding this token, else None.

        The cheap per-request validity check once the token's context is known (a context never
        changes for a token; whether it is still running does, from any server process)."""

    async def token_lease_and_get(self, token_hash: str, state: Backend, ns: str, key: str) -> LeaseAndEntry:
        """``token_lease`` and ``state.get(ns, key)``: a run's state GET. A repository whose database
        also holds the state reads both in one statement (one snapshot, one round trip); this
        default asks each in turn."""
        return await self.token_lease(token_hash), await state.get(ns, key)

    @abstractmethod
    async def heartbeat(self, invocation_id: str, token_hash: str, now: int, lease_until: int) -> bool | None:
        """Extend a live lease; return the run's cancel_requested, or None when the token is dead."""

    @abstractmethod
    async def finish(self, invocation_id: str, token_hash: str, outcome: Outcome, now: int) -> Run | None:
        """End a live invocation and move its run on; None when the token is dead."""

    @abstractmethod
    async def expire(self, now: int) -> int:
        """Running invocations whose lease ran out become lost, their runs interrupted; return how many."""

    @abstractmethod
    async def ping(self) -> None: ...

    @abstractmethod
    async def aclose(self) -> None: ...

    # export and import (see dump.py); only stores that outlive the process have them
    async def dump(self, table: str) -> list[dict[str, Any]]:
        """Every row of one of ``dump.TABLES``, as column → value."""
        raise InvalidRequest("export needs a store that outlives the process: sqlite:/// or postgresql://")

    async def load(self, table: str, rows: list[dict[str, Any]]) -> int:
        """Insert rows as exported, keeping rows the store already has; return how many were new."""
        raise InvalidRequest("import needs a store that outlives the process: sqlite:/// or postgresql://")


FINISHED = {"complete": "done", "fail": "failed", "hold": "held"}
"""The run status each outcome leads to, unless a cancel was requested (then ``cancelled``, except complete)."""


def finished_status(outcome: str, cancel_requested: bool) -> str:
    if cancel_requested and outcome != "complete":
        return "cancelled"
    return FINISHED[outcome]
