"""``run_agent``: run an agent function once, in-process, against an embedded store — no server.

The agent gets the same ``Invocation`` (or ``AsyncInvocation``) class a ``Worker`` gives it; only
the state and memory ops differ: they go straight to a store through ``keepstate.embedded.StoreOps``
and ``keepstate.memory.StoreMemoryOps``, in the namespaces and memory a server would use for
environment ``default`` (``inv.memory`` as the run's end user). So a later ``run_agent`` on the same
store sees the same session, agent, user and run state, and a test can drive a whole conversation
or a hold and its resume.

What comes back: the agent's return value, or — when the agent called ``inv.hold(request)`` — a
``Held`` carrying ``request`` and the ``run_id`` to resume with. ``Held`` compares equal to its
request, so ``assert run_agent(...) == {"question": ...}`` reads naturally, while
``isinstance(result, Held)`` tells a hold from an output. An exception raised by the agent
propagates unchanged.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, TypeVar, cast

from .batch import Planned
from .client import calls
from .client.calls import Multitask
from .client.invocation import AsyncInvocation, AsyncState, EventItem, HoldRequested, Invocation, State
from .client.records import Claim, Emitted, Run, RunEvent
from .clock import now_ms
from .embedded import Store, StoreOps
from .embedded import open as open_store
from .errors import InvalidRequest, KeepstateError, NoSession, NoUser, TooLarge
from .event_rules import check_events
from .memory import AsyncMemory, InlineAsyncMemoryOps, Memory, StoreMemoryOps
from .memory_rules import View, space_of
from .ops import Op
from .protocol import MAX_RUN_EVENTS
from .scope import AsyncScope, Items, Page, Scope, ScopeOps, Versioned, scope_namespace
from .stores.records import MULTITASK

__all__ = ["Held", "Recorder", "arun_agent", "run_agent"]

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class Held:
    """The agent held its run: ``request`` is what it asked; resume with ``run_id=held.run_id``."""

    request: Any
    run_id: str

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Held):
            return (self.request, self.run_id) == (other.request, other.run_id)
        return bool(self.request == other)

    __hash__ = None  # type: ignore[assignment]


@dataclass
class Recorder:
    """Child runs an agent started with ``inv.start_run`` (nothing runs them in a test), and the events
    it emitted with ``inv.emit`` / ``inv.emit_many`` (seq counting from 1 per recorder, so a hold and its
    resume given one recorder continue the count, as a run's log does)."""

    runs: list[Run] = field(default_factory=list)
    events: list[RunEvent] = field(default_factory=list)

    def emit(self, events: list[EventItem]) -> Emitted:
        """Record ``events``, refused as a server refuses them (1-100 a call, the type's form, 64 KiB of
        data, 10,000 a recorder: ``InvalidRequest``, ``TooLarge``, nothing recorded); the last seq."""
        items = [calls.event_item(event) for event in events]
        checked = check_events(items)
        if len(self.events) + len(checked) > MAX_RUN_EVENTS:
            raise TooLarge(f"a run's log holds at most {MAX_RUN_EVENTS} events")
        at = now_ms()
        for (kind, _), item in zip(checked, items, strict=True):
            self.events.append(RunEvent(len(self.events) + 1, kind, item["data"], at))
        return Emitted(len(self.events), False)

    def start(self, parent: Claim, agent: str, input: Any, session_id: str | None, multitask: str | None = None) -> Run:
        """A child run, recorded (``multitask`` is checked as the server would, and otherwise unused here:
        nothing runs in a test)."""
        if multitask not in (None, *MULTITASK):
            raise InvalidRequest(f"multitask must be one of {', '.join(MULTITASK)}")
        run = Run(
            id=f"run-{uuid.uuid4().hex[:12]}",
            agent=agent,
            session_id=session_id,
            user=parent.user,
            parent_id=parent.run_id,
            status="queued",
            input=input,
            output=None,
            error=None,
            hold=None,
            decision=None,
            created_at=None,
            updated_at=None,
        )
        self.runs.append(run)
        return run


class Refused:
    """A scope the run does not have (no session, no end user): every call raises ``error``."""

    def __init__(self, error: KeepstateError) -> None:
        self._error = error

    def __getattr__(self, name: str) -> Callable[..., NoReturn]:
        def refuse(*args: object) -> NoReturn:
            raise type(self._error)(self._error.message)

        return refuse


class AsyncOps:
    """Sync ops behind an awaitable face, for async agents on an in-process store."""

    def __init__(self, ops: ScopeOps) -> None:
        self._ops = ops

    async def get_versioned(self, key: str) -> Versioned:
        return self._ops.get_versioned(key)

    async def expires_at(self, key: str) -> int | None:
        return self._ops.expires_at(key)

    async def write(self, op: Op[T]) -> T:
        return self._ops.write(op)

    async def keys_page(self, prefix: str, after: str, limit: int) -> Page:
        return self._ops.keys_page(prefix, after, limit)

    async def tail(self, key: str, n: int) -> Items:
        return self._ops.tail(key, n)

    async def items(self, key: str, start: int, limit: int) -> Items:
        return self._ops.items(key, start, limit)

    async def batch(self, planned: Sequence[Planned]) -> list[Any]:
        """Planned writes target ``AsyncOps``: the store's batch runs on the ops they wrap."""
        inner = [replace(plan, target=plan.target._ops) for plan in planned]
        return self._ops.batch(inner)


def _scope_ops(store: Store, claim: Claim) -> list[ScopeOps]:
    """The run, session, agent and user ops of ``claim``, as a server would scope them."""

    def ops(kind: str, id: str | None) -> ScopeOps:
        return StoreOps(store, scope_namespace(kind, claim.agent, id))

    no_session, no_user = Refused(NoSession("this run has no session")), Refused(NoUser("this run has no end user"))
    session = cast(ScopeOps, no_session) if claim.session_id is None else ops("session", claim.session_id)
    user = cast(ScopeOps, no_user) if claim.user is None else ops("user", claim.user)
    return [ops("run", claim.run_id), session, ops("agent", None), user]


def _memory_ops(store: Store, claim: Claim) -> StoreMemoryOps:
    """The agent's memory as the claim's run sees it on a server: its end user's folder, environment default."""
    return StoreMemoryOps(store.documents, View(space_of("default", claim.agent), claim.user), store.embedder)


def _claim(
    agent: str,
    input: Any,
    session_id: str | None,
    user: str | None,
    run_id: str | None,
    decision: Any,
    parent_id: str | None,
) -> Claim:
    return Claim(
        id=f"inv-{uuid.uuid4().hex[:12]}",
        run_id=run_id or f"run-{uuid.uuid4().hex[:12]}",
        agent=agent,
        kind="start" if decision is None else "resume",
        input=input,
        decision=decision,
        session_id=session_id,
        user=user,
        parent_id=parent_id,
        token="",
        lease_seconds=30.0,
    )


def _open(store: Store | str | None) -> tuple[Store, bool]:
    if isinstance(store, Store):
        return store, False
    return open_store(store or "memory://"), True


def run_agent(
    fn: Callable[..., Any],
    input: Any = None,
    session_id: str | None = None,
    user: str | None = None,
    store: Store | str | None = None,
    agent: str = "agent",
    *,
    run_id: str | None = None,
    decision: Any = None,
    parent_id: str | None = None,
    children: Recorder | None = None,
) -> Any:
    """Run agent ``fn`` once on ``input`` and return its output, or a ``Held`` when it held.

    ``store``: a ``keepstate.Store``, a store URL, or None for a fresh ``memory://`` store (pass
    one store to several calls to share state between them). A ``decision`` makes this a resume
    (``inv.kind == "resume"``) of ``run_id``. Child runs the agent starts are recorded in
    ``children`` when given. Async agent functions work too, outside a running event loop; inside
    one, ``await arun_agent(...)``.
    """
    if inspect.iscoroutinefunction(fn):
        return asyncio.run(
            arun_agent(
                fn,
                input,
                session_id,
                user,
                store,
                agent,
                run_id=run_id,
                decision=decision,
                parent_id=parent_id,
                children=children,
            )
        )
    claim = _claim(agent, input, session_id, user, run_id, decision, parent_id)
    recorder = children if children is not None else Recorder()
    opened, owned = _open(store)
    try:
        state = State(*(Scope(ops) for ops in _scope_ops(opened, claim)))
        inv = Invocation(
            claim,
            state,
            lambda a, i, s, m: recorder.start(claim, a, i, s, m),
            Memory(_memory_ops(opened, claim)),
            recorder.emit,
        )
        try:
            return fn(inv)
        except HoldRequested as hold:
            return Held(hold.request, claim.run_id)
    finally:
        if owned:
            opened.close()


async def arun_agent(
    fn: Callable[..., Awaitable[Any]],
    input: Any = None,
    session_id: str | None = None,
    user: str | None = None,
    store: Store | str | None = None,
    agent: str = "agent",
    *,
    run_id: str | None = None,
    decision: Any = None,
    parent_id: str | None = None,
    children: Recorder | None = None,
) -> Any:
    """``run_agent`` for an ``async def`` agent, from async code: the same arguments and answers."""
    claim = _claim(agent, input, session_id, user, run_id, decision, parent_id)
    recorder = children if children is not None else Recorder()
    opened, owned = _open(store)

    async def start(a: str, i: Any, s: str | None, m: Multitask | None) -> Run:
        return recorder.start(claim, a, i, s, m)

    async def emit(events: list[EventItem]) -> Emitted:
        return recorder.emit(events)

    try:
        state = AsyncState(*(AsyncScope(AsyncOps(ops)) for ops in _scope_ops(opened, claim)))
        try:
            memory = AsyncMemory(InlineAsyncMemoryOps(_memory_ops(opened, claim)))
            return await fn(AsyncInvocation(claim, state, start, memory, emit))
        except HoldRequested as hold:
            return Held(hold.request, claim.run_id)
    finally:
        if owned:
            opened.close()
