"""What an agent function receives: ``Invocation`` (sync) and ``AsyncInvocation`` (async).

An invocation is one execution of a run — its start, or a resume after a person's decision. Its
state scopes are the shared ``Scope``/``AsyncScope`` (which hold the compare-and-set loop and key
paging) over a few primitive ops, and its agent's memory (``inv.memory``) the shared
``Memory``/``AsyncMemory`` likewise; here those ops go over HTTP with the invocation's run token,
and ``keepstate.testing`` gives the same classes ops straight on an embedded store.

``hold(request)`` raises ``HoldRequested``, a ``BaseException`` like ``KeyboardInterrupt``, so an
agent's ``except Exception`` cannot swallow it by accident; the worker catches it and holds the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from ..memory import AsyncMemory, Memory
from ..scope import Appended, AsyncScope, AsyncScopeOps, Page, Scope, ScopeOps, Versioned
from . import calls
from ._core import Call
from .records import Claim, Run

SCOPE_NAMES = ("run", "session", "agent", "user")


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
    """``ScopeOps`` over HTTP: ``/v0/state/{scope}/...`` with the run token."""

    def __init__(self, send: Callable[[Call[Any]], Any], scope: str, token: str) -> None:
        self._send, self._scope, self._token = send, scope, token

    def get_versioned(self, key: str) -> Versioned:
        result: Versioned = self._send(calls.state_get(self._scope, key, self._token))
        return result

    def put(self, key: str, value: Any, if_version: int | None) -> int:
        result: int = self._send(calls.state_put(self._scope, key, value, if_version, self._token))
        return result

    def delete(self, key: str, if_version: int | None) -> None:
        self._send(calls.state_delete(self._scope, key, if_version, self._token))

    def append(self, key: str, items: list[Any]) -> Appended:
        result: Appended = self._send(calls.state_append(self._scope, key, items, self._token))
        return result

    def keys_page(self, prefix: str, after: str, limit: int) -> Page:
        result: Page = self._send(calls.state_keys(self._scope, prefix, after, limit, self._token))
        return result


class AsyncHttpOps(AsyncScopeOps):
    """``AsyncScopeOps`` over HTTP: ``/v0/state/{scope}/...`` with the run token."""

    def __init__(self, send: Callable[[Call[Any]], Awaitable[Any]], scope: str, token: str) -> None:
        self._send, self._scope, self._token = send, scope, token

    async def get_versioned(self, key: str) -> Versioned:
        result: Versioned = await self._send(calls.state_get(self._scope, key, self._token))
        return result

    async def put(self, key: str, value: Any, if_version: int | None) -> int:
        result: int = await self._send(calls.state_put(self._scope, key, value, if_version, self._token))
        return result

    async def delete(self, key: str, if_version: int | None) -> None:
        await self._send(calls.state_delete(self._scope, key, if_version, self._token))

    async def append(self, key: str, items: list[Any]) -> Appended:
        result: Appended = await self._send(calls.state_append(self._scope, key, items, self._token))
        return result

    async def keys_page(self, prefix: str, after: str, limit: int) -> Page:
        result: Page = await self._send(calls.state_keys(self._scope, prefix, after, limit, self._token))
        return result


def http_state(send: Callable[[Call[Any]], Any], token: str) -> State:
    return State(*(Scope(HttpOps(send, name, token)) for name in SCOPE_NAMES))


def async_http_state(send: Callable[[Call[Any]], Awaitable[Any]], token: str) -> AsyncState:
    return AsyncState(*(AsyncScope(AsyncHttpOps(send, name, token)) for name in SCOPE_NAMES))


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

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind} of run {self.run_id} ({self.agent})>"


class Invocation(_Facts):
    """One execution of a run, for a sync agent function: facts, ``state``, ``memory``, ``hold``, ``start_run``."""

    def __init__(self, claim: Claim, state: State, start_run: Callable[[str, Any, str | None], Run],
                 memory: Memory) -> None:
        super().__init__(claim)
        self.state = state
        self.memory = memory
        """The agent's memory, as this run's end user: ``users/{user}/…`` is that user's folder."""
        self._start_run = start_run

    def start_run(self, agent: str, input: Any = None, session_id: str | None = None) -> Run:
        """Start a child run of ``agent``: its ``parent_id`` is this run and its ``user`` this run's."""
        return self._start_run(agent, input, session_id)


class AsyncInvocation(_Facts):
    """One execution of a run, for an async agent function: ``state`` and ``start_run`` are awaited."""

    def __init__(
        self, claim: Claim, state: AsyncState, start_run: Callable[[str, Any, str | None], Awaitable[Run]],
        memory: AsyncMemory,
    ) -> None:
        super().__init__(claim)
        self.state = state
        self.memory = memory
        """The agent's memory, as this run's end user: ``users/{user}/…`` is that user's folder."""
        self._start_run = start_run

    async def start_run(self, agent: str, input: Any = None, session_id: str | None = None) -> Run:
        """Start a child run of ``agent``: its ``parent_id`` is this run and its ``user`` this run's."""
        return await self._start_run(agent, input, session_id)
