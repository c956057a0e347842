"""The platform facet in process memory, for ``memory://`` stores (tests, one-process apps).

Every method runs to completion on the event loop thread without awaiting in between, so each
guarded operation is atomic by construction. Nothing survives the process.
"""

from __future__ import annotations

import asyncio
import heapq
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from itertools import count, islice
from typing import Any, TypeVar

from ...clock import now_ms
from ...errors import InvalidRequest, NotFound, SessionBusy
from ..base import PlatformFacet, RunEventLog
from ..records import (
    ACTIVE,
    FINAL,
    FINISHED,
    NULL,
    AgentStats,
    Claimed,
    Outcome,
    RunContext,
    RunFilter,
    StoredInvocation,
    StoredKey,
    StoredRun,
    StoredSession,
    agent_stats,
    finished_status,
)
from ..remembered import IN_FLIGHT_S, Answer, Memo, Remembered, in_flight
from ..session_forks import Forked
from .events import MemoryEventLog

T = TypeVar("T")


class MemoryPlatform(PlatformFacet):
    def __init__(self) -> None:
        self._seq = count(1)
        self._keys: dict[str, tuple[StoredKey, str]] = {}  # id -> (record, secret hash)
        self._by_hash: dict[str, str] = {}
        self._sessions: dict[tuple[str, str], StoredSession] = {}
        self._runs: dict[str, StoredRun] = {}
        self._callers: dict[str, str] = {}  # run id -> caller, for idempotency
        self._invocations: dict[str, StoredInvocation] = {}
        self._by_token: dict[str, str] = {}
        self._of_session: dict[tuple[str, str], list[str]] = {}  # (env, session) -> its run ids, oldest first
        self._claims: dict[tuple[str, str], int] = {}  # (env, agent) -> last claim
        self._registered: dict[tuple[str, str], set[str]] = {}  # (env, session) -> agents registered in it
        self._end_users: dict[tuple[str, str], str] = {}  # (env, user) -> the member key acting for it
        self._sessions_lock = threading.Lock()
        """Registering and deleting a session each take it: the sync embedded store registers from its own
        loop thread while a server's loop may delete, and both read, then change, two tables."""
        self._events = MemoryEventLog(self._live_run)
        self._remembered: dict[tuple[str, str], tuple[Remembered, int]] = {}  # (caller, key) -> answer, when
        self._in_flight: set[tuple[str, str]] = set()

    @property
    def events(self) -> RunEventLog:
        return self._events

    def _put(self, run: StoredRun) -> StoredRun:
        """Store ``run`` (new or changed): the one way a run is written, so that every status change
        writes its events in the same step."""
        before = self._runs.get(run.id)
        self._runs[run.id] = run
        if before is None or before.status != run.status:
            self._events.status_changed(run)
        return run

    # keys
    async def add_key(self, key: StoredKey, secret_hash: str) -> None:
        self._keys[key.id] = (key, secret_hash)
        self._by_hash[secret_hash] = key.id

    async def ensure_admin_key(self, key: StoredKey, secret_hash: str) -> None:
        known = self._by_hash.get(secret_hash)
        if known is not None:
            old = self._keys[known][0]
            key = replace(old, env=key.env, role="admin", revoked=False)
        await self.add_key(replace(key, role="admin"), secret_hash)

    async def key_by_hash(self, secret_hash: str) -> StoredKey | None:
        key_id = self._by_hash.get(secret_hash)
        return None if key_id is None else self._keys[key_id][0]

    async def list_keys(self, env: str) -> list[StoredKey]:
        keys = [key for key, _ in self._keys.values() if key.env == env and not key.revoked]
        return sorted(keys, key=lambda k: (k.created_at, k.id))

    async def revoke_key(self, env: str, key_id: str, now: int) -> list[str] | None:
        found = self._keys.get(key_id)
        if found is None or found[0].env != env or found[0].revoked:
            return None
        self._keys[key_id] = (replace(found[0], revoked=True), found[1])
        held = [i for i in self._invocations.values() if i.status == "running" and i.claimed_by == key_id]
        return self._lose(held, now)

    async def has_keys(self) -> bool:
        return any(not key.revoked for key, _ in self._keys.values())

    async def add_first_key(self, key: StoredKey, secret_hash: str) -> bool:
        if await self.has_keys():
            return False
        await self.add_key(key, secret_hash)
        return True

    # sessions
    async def create_session(self, session: StoredSession) -> tuple[StoredSession, bool]:
        return self._create_session(session)

    def _create_session(self, session: StoredSession) -> tuple[StoredSession, bool]:
        existing = self._sessions.get((session.env, session.id))
        if existing is not None:
            return existing, False
        created = replace(session, seq=next(self._seq))
        self._sessions[(session.env, session.id)] = created
        return created, True

    async def bind_user(self, env: str, user: str, owner: str) -> str:
        return self._end_users.setdefault((env, user), owner)

    async def register_session(self, session: StoredSession, agent: str) -> tuple[StoredSession, bool]:
        with self._sessions_lock:
            stored = self._create_session(session)
            self._registered.setdefault((session.env, session.id), set()).add(agent)
        return stored

    async def add_session_agent(self, session: StoredSession, agent: str) -> bool:
        with self._sessions_lock:
            stored = self._sessions.get((session.env, session.id))
            if stored is None or stored.made != session.made:
                return False
            self._registered.setdefault((session.env, session.id), set()).add(agent)
        return True

    async def get_session(self, env: str, session_id: str) -> StoredSession | None:
        return self._sessions.get((env, session_id))

    async def list_sessions(
        self, env: str, owner: str | None, user: str | None, after: int, limit: int, desc: bool = False
    ) -> list[StoredSession]:
        found = (
            s
            for s in _in_order(self._sessions, desc)
            if s.env == env and _past(s.seq, after, desc) and owner in (None, s.owner) and user in (None, s.user)
        )
        return list(islice(found, limit))

    async def session_agents(self, env: str, session_id: str) -> list[str]:
        return self._agents_of(env, session_id)

    def _agents_of(self, env: str, session_id: str) -> list[str]:
        ran = {self._runs[run_id].agent for run_id in self._of_session.get((env, session_id), [])}
        return sorted(ran | self._registered.get((env, session_id), set()))

    async def update_session(
        self, env: str, session_id: str, owner: str | None, metadata: bytes
    ) -> StoredSession | None:
        found = self._sessions.get((env, session_id))
        if found is None or owner not in (None, found.owner):
            return None
        self._sessions[(env, session_id)] = found = replace(found, metadata=metadata)
        return found

    def delete_session(self, env: str, session_id: str, now: int) -> list[str] | None:
        """Delete an idle session, cancel its held runs and forget its registered agents; its agents
        (``MemoryDatabase.delete_session`` drops their state)."""
        with self._sessions_lock:
            if (env, session_id) not in self._sessions:
                return None
            self._expire_overdue(now, lambda run: (run.env, run.session_id) == (env, session_id))
            if self._session_busy(env, session_id):
                raise SessionBusy(f"session {session_id!r} has a queued or running run")
            del self._sessions[(env, session_id)]
            for run in list(self._runs.values()):
                if (run.env, run.session_id, run.status) == (env, session_id, "held"):
                    self._put(replace(run, status="cancelled", updated_at=now))
            self._events.drop(self._of_session.get((env, session_id), []))
            agents = self._agents_of(env, session_id)
            self._registered.pop((env, session_id), None)
            return agents

    def fork_session(self, source: StoredSession, fork: StoredSession) -> Forked | None:
        """The platform's part of a fork (``MemoryDatabase.fork_session`` copies the state)."""
        with self._sessions_lock:
            found = self._sessions.get((source.env, source.id))
            if found is None or found.made != source.made:
                return None
            stored, created = self._create_session(fork)
            if not created:
                return Forked(stored, False, [])
            agents = self._agents_of(source.env, source.id)
            self._registered.setdefault((fork.env, fork.id), set()).update(agents)
            return Forked(stored, True, agents)

    def _session_busy(self, env: str, session_id: str) -> bool:
        return any(self._runs[run_id].status in ACTIVE for run_id in self._of_session.get((env, session_id), []))

    # runs
    async def start_run(
        self, run: StoredRun, caller: str, invocation: StoredInvocation, multitask: str = "reject"
    ) -> tuple[StoredRun, bool]:
        if run.idempotency_key is not None:
            for other in self._runs.values():
                if (other.env, other.idempotency_key) == (run.env, run.idempotency_key) and (
                    self._callers[other.id] == caller
                ):
                    return other, False
        if run.session_id is not None:
            if (run.env, run.session_id) not in self._sessions:
                raise NotFound(f"no session {run.session_id!r}")
            where = (run.env, run.session_id)
            self._expire_overdue(run.created_at, lambda other: (other.env, other.session_id) == where)
            if multitask == "reject" and self._session_busy(run.env, run.session_id):
                raise SessionBusy(f"session {run.session_id!r} has a queued or running run")
            if multitask == "interrupt":
                self._interrupt(run.env, run.session_id, run.created_at)
        stored = replace(run, seq=next(self._seq))
        self._put(stored)
        self._callers[run.id] = caller
        if run.session_id is not None:
            self._of_session.setdefault((run.env, run.session_id), []).append(run.id)
            self._registered.setdefault((run.env, run.session_id), set()).add(run.agent)
        self._queue(invocation)
        return stored, True

    def _interrupt(self, env: str, session_id: str, now: int) -> None:
        """The session's queued runs (and their invocations) cancelled, a cancel requested of its running ones."""
        for run_id in self._of_session.get((env, session_id), []):
            run = self._runs[run_id]
            if run.status == "queued":
                self._put(replace(run, status="cancelled", updated_at=now))
                self._cancel_queued_invocations(run_id)
            elif run.status == "running":
                self._put(replace(run, cancel_requested=True, updated_at=now))

    def _cancel_queued_invocations(self, run_id: str) -> None:
        for inv in list(self._invocations.values()):
            if inv.run_id == run_id and inv.status == "queued":
                self._invocations[inv.id] = replace(inv, status="cancelled")

    def _queue(self, invocation: StoredInvocation) -> None:
        self._invocations[invocation.id] = replace(invocation, seq=next(self._seq))

    async def get_run(self, env: str, run_id: str) -> StoredRun | None:
        run = self._runs.get(run_id)
        return run if run is not None and run.env == env else None

    async def list_runs(self, query: RunFilter) -> list[StoredRun]:
        q = query
        found = (
            r
            for r in self._candidates(q)
            if r.env == q.env
            and _past(r.seq, q.after, q.desc)
            and q.owner in (None, r.owner)
            and q.session_id in (None, r.session_id)
            and q.status in (None, r.status)
            and q.agent in (None, r.agent)
            and q.parent_id in (None, r.parent_id)
        )
        return list(islice(found, q.limit))

    def _candidates(self, q: RunFilter) -> Iterator[StoredRun]:
        """The runs a listing looks at, in its order: a session's own when it names one (a session's
        runs are kept apart, as an index would), else every run."""
        if q.session_id is None:
            return _in_order(self._runs, q.desc)
        ids = self._of_session.get((q.env, q.session_id), [])
        return (self._runs[run_id] for run_id in (reversed(ids) if q.desc else ids))

    async def decide(
        self, env: str, run_id: str, decision: bytes, invocation: StoredInvocation, now: int
    ) -> StoredRun | None:
        run = await self.get_run(env, run_id)
        if run is None or run.status != "held":
            return None
        run = self._put(
            replace(run, status="queued", decision=decision, updated_at=now, queue_deadline=invocation.queue_deadline)
        )
        self._queue(invocation)
        return run

    async def cancel(self, env: str, run_id: str, now: int) -> StoredRun | None:
        if await self.get_run(env, run_id) is None:
            return None
        self._expire_overdue(now, lambda other: other.id == run_id)
        run = self._runs[run_id]
        if run.status in ("queued", "held"):
            run = replace(run, status="cancelled", updated_at=now)
            self._cancel_queued_invocations(run_id)
        elif run.status == "running":
            run = replace(run, cancel_requested=True, updated_at=now)
        return self._put(run)

    # invocations
    def _oldest_queued(self, env: str, agents: list[str], now: int) -> StoredInvocation | None:
        """The oldest queued invocation of ``agents`` not past its deadline whose turn it is, as
        ``sql.TURN_FREE`` says: a resume always; a start when no invocation of its session queued before it
        is still queued or running: walking them in ``seq`` order (``_in_order``'s), the sessions seen active."""
        busy: set[tuple[str, str]] = set()
        for inv in self._invocations.values():
            if inv.status not in ACTIVE:
                continue
            run = self._runs[inv.run_id]
            where = None if run.session_id is None else (run.env, run.session_id)
            takes = inv.env == env and inv.status == "queued" and inv.agent in agents
            if takes and not _overdue(inv.queue_deadline, now) and (inv.kind != "start" or where not in busy):
                return inv
            if where is not None:
                busy.add(where)
        return None

    async def has_queued(self, env: str, agents: list[str], now: int) -> bool:
        return self._oldest_queued(env, agents, now) is not None

    async def claim(
        self, env: str, agents: list[str], token_hash: str, lease_until: int, now: int, claimer: str
    ) -> Claimed | None:
        inv = self._oldest_queued(env, agents, now)
        key = self._keys.get(claimer)
        if inv is None or key is None or key[0].revoked:
            return None
        inv = replace(inv, status="running", token_hash=token_hash, lease_until=lease_until, claimed_by=claimer)
        self._invocations[inv.id] = inv
        self._by_token[token_hash] = inv.id
        run = self._put(
            replace(
                self._runs[inv.run_id], status="running", cancel_requested=False, updated_at=now, queue_deadline=None
            )
        )
        return Claimed(inv, run)

    def _live_run(self, invocation_id: str, token_hash: str, now: int) -> StoredRun | None:
        """The run of a live invocation, while it runs (what a worker's emit needs)."""
        inv = self._live(invocation_id, token_hash, now)
        run = None if inv is None else self._runs[inv.run_id]
        return run if run is not None and run.status == "running" else None

    def _live(self, invocation_id: str, token_hash: str, now: int) -> StoredInvocation | None:
        inv = self._invocations.get(invocation_id)
        if inv is None or inv.token_hash != token_hash or inv.status != "running" or inv.lease_until < now:
            return None
        return inv

    async def token_context(self, token_hash: str) -> RunContext | None:
        inv = self._invocations.get(self._by_token.get(token_hash, ""))
        if inv is None or inv.status != "running":
            return None
        run = self._runs[inv.run_id]
        return RunContext(inv.id, run.id, run.env, run.agent, run.session_id, run.user, run.owner, inv.lease_until)

    async def token_lease(self, token_hash: str) -> int | None:
        inv = self._invocations.get(self._by_token.get(token_hash, ""))
        return None if inv is None or inv.status != "running" else inv.lease_until

    async def heartbeat(self, invocation_id: str, token_hash: str, now: int, lease_until: int) -> bool | None:
        inv = self._live(invocation_id, token_hash, now)
        if inv is None:
            return None
        self._invocations[inv.id] = replace(inv, lease_until=lease_until)
        return self._runs[inv.run_id].cancel_requested

    async def finish(self, invocation_id: str, token_hash: str, outcome: Outcome, now: int) -> StoredRun | None:
        inv = self._live(invocation_id, token_hash, now)
        if inv is None:
            return None
        self._invocations[inv.id] = replace(inv, status=FINISHED[outcome.kind])
        run = self._runs[inv.run_id]
        status = finished_status(outcome.kind, run.cancel_requested)
        run = replace(run, status=status, updated_at=now)
        if outcome.kind == "complete":
            run = replace(run, output=outcome.data)
        elif outcome.kind == "fail":
            run = replace(run, error=outcome.data)
        else:
            run = replace(run, hold=outcome.data, decision=NULL)
        return self._put(run)

    async def expire(self, now: int) -> int:
        return len(
            self._lose([i for i in self._invocations.values() if i.status == "running" and i.lease_until < now], now)
        )

    def _lose(self, invocations: list[StoredInvocation], now: int) -> list[str]:
        """Running invocations → lost and their runs → interrupted; the runs' ids."""
        for inv in invocations:
            self._invocations[inv.id] = replace(inv, status="lost")
            run = self._runs[inv.run_id]
            if run.status == "running":
                self._put(replace(run, status="interrupted", updated_at=now))
        return [inv.run_id for inv in invocations]

    async def expire_queued(self, now: int) -> int:
        return self._expire_overdue(now, lambda run: True)

    def _expire_overdue(self, now: int, which: Callable[[StoredRun], bool]) -> int:
        """Queued runs chosen by ``which`` past their deadline → expired, with their queued invocations."""
        due = {
            run.id
            for run in self._runs.values()
            if run.status == "queued" and _overdue(run.queue_deadline, now) and which(run)
        }
        for run_id in due:
            self._put(replace(self._runs[run_id], status="expired", updated_at=now))
        for inv in list(self._invocations.values()):
            if inv.run_id in due and inv.status == "queued":
                self._invocations[inv.id] = replace(inv, status="expired")
        return len(due)

    # agents, retention
    async def touch_agents(self, env: str, agents: list[str], now: int) -> None:
        for agent in agents:
            self._claims[(env, agent)] = max(now, self._claims.get((env, agent), now))

    async def agent_stats(self, env: str | None) -> list[AgentStats]:
        counts = Counter((r.env, r.agent, r.status) for r in self._runs.values() if env in (None, r.env))
        oldest: dict[tuple[str, str], int] = {}
        for inv in self._invocations.values():
            if inv.status == "queued" and env in (None, inv.env):
                key = (inv.env, inv.agent)
                oldest[key] = min(inv.created_at, oldest.get(key, inv.created_at))
        return agent_stats(
            [(*key, count) for key, count in counts.items()],
            [(*key, at) for key, at in self._claims.items() if env in (None, key[0])],
            [(*key, at) for key, at in oldest.items()],
        )

    async def purge_runs(self, before: int, limit: int) -> int:
        oldest = heapq.nsmallest(
            limit, (run for run in self._runs.values() if _purgeable(run, before)), key=lambda run: run.updated_at
        )
        gone = {run.id for run in oldest}
        for run_id in gone:
            run = self._runs.pop(run_id)
            self._events.forget(run_id)
            self._callers.pop(run_id, None)
            if run.session_id is not None:
                self._of_session[(run.env, run.session_id)].remove(run_id)
        for inv in [inv for inv in self._invocations.values() if inv.run_id in gone]:
            del self._invocations[inv.id]
            self._by_token.pop(inv.token_hash or "", None)
        return len(gone)

    async def count_purgeable(self, before: int) -> int:
        return sum(1 for run in self._runs.values() if _purgeable(run, before))

    async def recall(self, caller: str, key: str) -> Remembered | None:
        found = self._remembered.get((caller, key))
        return None if found is None else found[0]

    async def remember(self, memo: Memo, work: Callable[[], Awaitable[T]]) -> T | Remembered:
        """The key is held in flight while ``work`` runs; a repeat polls for its end (memory:// serves
        one process, and a repeat racing its first write is rare: no wakeup machinery for it)."""
        name = (memo.caller, memo.key)
        deadline = time.monotonic() + IN_FLIGHT_S
        while name in self._in_flight:
            if time.monotonic() > deadline:
                raise in_flight(memo.key)
            await asyncio.sleep(0.01)
        found = self._remembered.get(name)
        if found is not None:
            return found[0]
        self._in_flight.add(name)
        try:
            result = await work()
            answer = memo.render(result)
            if answer is not None:
                self._remembered[name] = (Remembered(memo.fingerprint, answer), now_ms())
            return result
        finally:
            self._in_flight.discard(name)

    async def keep(self, memo: Memo, answer: Answer, now: int) -> None:
        self._remembered.setdefault((memo.caller, memo.key), (Remembered(memo.fingerprint, answer), now))

    async def count_remembered(self, before: int) -> int:
        return sum(1 for _, when in self._remembered.values() if when < before)

    async def purge_remembered(self, before: int, limit: int) -> int:
        old = heapq.nsmallest(limit, (item for item in self._remembered.items() if item[1][1] < before), key=_age)
        for name, _ in old:
            del self._remembered[name]
        return len(old)

    async def dump(self, table: str) -> list[dict[str, Any]]:
        raise InvalidRequest("export needs a store that outlives the process: sqlite:/// or postgresql://")

    async def load(self, table: str, rows: list[dict[str, Any]]) -> int:
        raise InvalidRequest("import needs a store that outlives the process: sqlite:/// or postgresql://")


def _in_order(records: dict[Any, T], desc: bool) -> Iterator[T]:
    """Records by ``seq``, oldest first or newest first: a dict keeps them in insertion order, which is
    ``seq`` order (a record replaced in place keeps its place and its seq)."""
    return reversed(records.values()) if desc else iter(records.values())


def _past(seq: int, after: int, desc: bool) -> bool:
    """Whether a record comes after the cursor ``after`` (0: the start) in the listing's order."""
    return not after or (seq < after if desc else seq > after)


def _overdue(deadline: int | None, now: int) -> bool:
    """Whether a queue deadline has passed at ``now`` (None: it never does): claimable up to and at its
    very millisecond, expired from the next one, as in the SQL backends."""
    return deadline is not None and deadline < now


def _purgeable(run: StoredRun, before: int) -> bool:
    return run.status in FINAL and run.updated_at < before


def _age(item: tuple[tuple[str, str], tuple[Remembered, int]]) -> int:
    return item[1][1]
