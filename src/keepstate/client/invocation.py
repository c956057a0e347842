"""What an agent function receives: ``Invocation`` (sync) and ``AsyncInvocation`` (async).

An invocation is one execution of a run — its start, or a resume after a person's decision. Its
state scopes are the shared ``Scope``/``AsyncScope`` (which hold the compare-and-set loop and key
paging) over a few primitive ops, and its agent's memory (``inv.memory``) the shared
``Memory``/``AsyncMemory`` likewise; here those ops go over HTTP with the invocation's run token,
and ``keepstate.testing`` gives the same classes ops straight on an embedded store.

``emit(data, type="message")`` and ``emit_many(events)`` append to the run's event log (what a caller
streams with ``client.runs.stream``); their answer, like a heartbeat's, brings ``cancel_requested``,
which both mirror onto the invocation through ``_Facts._mirror_cancel`` (once True, it stays True: a
cancel is never withdrawn, and an older heartbeat's answer arriving late must not hide a newer one).

``hold(request)`` raises ``HoldRequested``, a ``BaseException`` like ``KeyboardInterrupt``, so an
agent's ``except Exception`` cannot swallow it by accident; the worker catches it and holds the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from ..batch import Planned
from ..errors import InvalidRequest
from ..memory import AsyncMemory, Memory
from ..ops import Op
from ..scope import AsyncScope, AsyncScopeOps, Items, Page, Scope, ScopeOps, Versioned
from . import state_calls
from ._core import Call
from .calls import Multitask
from .records import Claim, Emitted, Run
from .state_calls import StateTarget

T = TypeVar("T")

SCOPE_NAMES = ("run", "session", "agent", "user")
EventItem = Mapping[str, Any]
"""One item of ``emit_many``: ``{"type": str, "data": value}``, ``type`` optional (``message``)."""
Emit = Callable[[list[EventItem]], Emitted]
AsyncEmit = Callable[[list[EventItem]], Awaitable[Emitted]]


class HoldRequested(BaseException):
    """Raised by ``inv.hold(request)``: the invocation ends and its run is held with ``request``."""

    def __init__(self, request: Any) -> None:
        super().__init__("the agent asked to hold its run for a decision")
        self.request = request


@dataclass(frozen=True, slots=True)
class State:
    """``inv.state``: the four scopes of a run, each a ``Scope``."""

    run: Scope
    session: Scope
    agent: Scope
    user: Scope


@dataclass(frozen=True, slots=True)
class AsyncState:
    """``inv.state`` for async agents: the four scopes, each an ``AsyncScope``."""

    run: AsyncScope
    session: AsyncScope
    agent: AsyncScope
    user: AsyncScope


class HttpOps(ScopeOps):
    """``ScopeOps`` over HTTP: the State API at one ``StateTarget`` (a run token's scope or a caller's prefix)."""

    def __init__(self, send: Callable[[Call[Any]], Any], target: StateTarget) -> None:
        self._send, self.target = send, target

    def get_versioned(self, key: str) -> Versioned:
        result: Versioned = self._send(state_calls.get(self.target, key))
        return result

    def expires_at(self, key: str) -> int | None:
        result: int | None = self._send(state_calls.expires_at(self.target, key))
        return result

    def write(self, op: Op[T]) -> T:
        result: T = self._send(state_calls.write(self.target, op))
        return result

    def keys_page(self, prefix: str, after: str, limit: int) -> Page:
        result: Page = self._send(state_calls.keys(self.target, prefix, after, limit))
        return result

    def tail(self, key: str, n: int) -> Items:
        result: Items = self._send(state_calls.tail(self.target, key, n))
        return result

    def items(self, key: str, start: int, limit: int) -> Items:
        result: Items = self._send(state_calls.items(self.target, key, start, limit))
        return result

    def batch(self, planned: Sequence[Planned]) -> list[Any]:
        result: list[Any] = self._send(_batch_call(self.target, planned))
        return result


class AsyncHttpOps(AsyncScopeOps):
    """``AsyncScopeOps`` over HTTP, as ``HttpOps``."""

    def __init__(self, send: Callable[[Call[Any]], Awaitable[Any]], target: StateTarget) -> None:
        self._send, self.target = send, target

    async def get_versioned(self, key: str) -> Versioned:
        result: Versioned = await self._send(state_calls.get(self.target, key))
        return result

    async def expires_at(self, key: str) -> int | None:
        result: int | None = await self._send(state_calls.expires_at(self.target, key))
        return result

    async def write(self, op: Op[T]) -> T:
        result: T = await self._send(state_calls.write(self.target, op))
        return result

    async def keys_page(self, prefix: str, after: str, limit: int) -> Page:
        result: Page = await self._send(state_calls.keys(self.target, prefix, after, limit))
        return result

    async def tail(self, key: str, n: int) -> Items:
        result: Items = await self._send(state_calls.tail(self.target, key, n))
        return result

    async def items(self, key: str, start: int, limit: int) -> Items:
        result: Items = await self._send(state_calls.items(self.target, key, start, limit))
        return result

    async def batch(self, planned: Sequence[Planned]) -> list[Any]:
        result: list[Any] = await self._send(_batch_call(self.target, planned))
        return result


def _batch_call(target: StateTarget, planned: Sequence[Planned]) -> Call[Any]:
    """One batch call of planned writes; every write must target ops of this client kind."""
    targets = [getattr(plan.target, "target", None) for plan in planned]
    if target.token is None or not all(isinstance(found, StateTarget) for found in targets):
        raise InvalidRequest("a batch over HTTP writes to the scopes of one invocation")
    return state_calls.batch(target.token, planned, targets)  # type: ignore[arg-type]


def http_state(send: Callable[[Call[Any]], Any], token: str) -> State:
    return State(*(Scope(HttpOps(send, StateTarget.of_run(name, token))) for name in SCOPE_NAMES))


def async_http_state(send: Callable[[Call[Any]], Awaitable[Any]], token: str) -> AsyncState:
    return AsyncState(*(AsyncScope(AsyncHttpOps(send, StateTarget.of_run(name, token))) for name in SCOPE_NAMES))


class _Facts:
    """The facts of an invocation, the same for the sync and async kinds."""

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        self.id = claim.id
        self.input: Any = claim.input
        self.run_id = claim.run_id
        self.agent = claim.agent
        self.session_id = claim.session_id
        self.user = claim.user
        self.parent_id = claim.parent_id
        self.kind = claim.kind
        self.decision: Any = claim.decision
        self.cancel_requested = False
        self.lease_lost = False

    def hold(self, request: Any = None) -> NoReturn:
        """End this invocation with the run held for a decision on ``request``. Save progress first."""
        raise HoldRequested(request)

    def _mirror_cancel(self, cancel_requested: bool) -> None:
        """Mirror a heartbeat's or an emit's ``cancel_requested``; once True it stays True."""
        self.cancel_requested = self.cancel_requested or bool(cancel_requested)

    def _emitted(self, answer: Emitted) -> int:
        self._mirror_cancel(answer.cancel_requested)
        return answer.seq

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind} of run {self.run_id} ({self.agent})>"


class Invocation(_Facts):
    """One execution of a run, for a sync agent function: facts, ``state``, ``memory``, ``hold``,
    ``start_run``, ``emit``."""

    def __init__(
        self,
        claim: Claim,
        state: State,
        start_run: Callable[[str, Any, str | None, Multitask | None], Run],
        memory: Memory,
        emit: Emit,
    ) -> None:
        super().__init__(claim)
        self.state = state
        self.memory = memory
        """The agent's memory, as this run's end user: ``users/{user}/…`` is that user's folder."""
        self._start_run = start_run
        self._emit = emit

    def emit(self, data: Any, type: str = "message") -> int:
        """Append one event to the run's log; its seq. Also refreshes ``cancel_requested``."""
        return self.emit_many([{"type": type, "data": data}])

    def emit_many(self, events: Iterable[EventItem]) -> int:
        """Append ``events`` (``{"type"?: str, "data": value}`` each) to the run's log in one call, all or
        none; the seq of the last. At most 100 a call (``TooLarge``); also refreshes ``cancel_requested``."""
        return self._emitted(self._emit(list(events)))

    def start_run(
        self, agent: str, input: Any = None, session_id: str | None = None, multitask: Multitask | None = None
    ) -> Run:
        """Start a child run of ``agent``: its ``parent_id`` is this run and its ``user`` this run's.
        ``multitask``: what happens while ``session_id`` has a run active (``Runs.start``; reject when None)."""
        return self._start_run(agent, input, session_id, multitask)


class AsyncInvocation(_Facts):
    """One execution of a run, for an async agent function: ``state``, ``start_run`` and ``emit`` are awaited."""

    def __init__(
        self,
        claim: Claim,
        state: AsyncState,
        start_run: Callable[[str, Any, str | None, Multitask | None], Awaitable[Run]],
        memory: AsyncMemory,
        emit: AsyncEmit,
    ) -> None:
        super().__init__(claim)
        self.state = state
        self.memory = memory
        """The agent's memory, as this run's end user: ``users/{user}/…`` is that user's folder."""
        self._start_run = start_run
        self._emit = emit

    async def emit(self, data: Any, type: str = "message") -> int:
        """Append one event to the run's log; its seq. Also refreshes ``cancel_requested``."""
        return await self.emit_many([{"type": type, "data": data}])

    async def emit_many(self, events: Iterable[EventItem]) -> int:
        """Append ``events`` (``{"type"?: str, "data": value}`` each) to the run's log in one call, all or
        none; the seq of the last. At most 100 a call (``TooLarge``); also refreshes ``cancel_requested``."""
        return self._emitted(await self._emit(list(events)))

    async def start_run(
        self, agent: str, input: Any = None, session_id: str | None = None, multitask: Multitask | None = None
    ) -> Run:
        """Start a child run of ``agent``: its ``parent_id`` is this run and its ``user`` this run's.
        ``multitask``: what happens while ``session_id`` has a run active (``Runs.start``; reject when None)."""
        return await self._start_run(agent, input, session_id, multitask)
