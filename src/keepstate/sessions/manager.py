"""``SessionManager``: the runtime's session rules over a ``SessionStore``.

Every ``open`` runs inside the session's lease (``SessionStore.hold``), so the check-then-act of a
confirmation is serialised across processes. The order of checks is deliberate: a session left
``executing`` raises ``InterruptedExecution`` *before* expiry or a config change are looked at, so
clearing a stale conversation can never erase the record of an effect whose outcome is unknown.

``effect`` writes the executing marker (a fenced write, committed) before the effect's body runs,
and the store never lets an executing state expire. Afterwards the outcome decides: success or a
definite failure returns the session to idle; an error whose outcome is unknown (timeout, dropped
connection, store outage, cancellation) leaves it executing for ``reconcile``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..clock import now_ms
from ..errors import InterruptedExecution, LeaseLost, Unavailable
from ..values import check_key
from .base import SessionStore
from .state import DEFAULT_HISTORY_LIMIT, SessionState

UNKNOWN_OUTCOME: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError, OSError, Unavailable, LeaseLost)
"""Errors after which nobody knows whether the effect happened: the session stays executing."""


@dataclass
class EffectRecord:
    """What the body of ``effect`` sees: set ``result`` to have it saved with the outcome."""

    name: str
    request: Any
    result: Any = None


class ManagedSession:
    """An opened session: its ``state`` and the ``effect`` helper. Saved when the block exits."""

    def __init__(self, manager: SessionManager, id: str, state: SessionState) -> None:
        self.manager = manager
        self.id = id
        self.state = state

    async def save(self) -> None:
        """Write the state now (fenced by the lease), pushing its expiry ``ttl_seconds`` ahead."""
        self.state.expires_at = now_ms() + int(self.manager.ttl_seconds * 1000)
        await self.manager.store.set(self.id, self.state)

    @contextlib.asynccontextmanager
    async def effect(self, name: str, request: Any) -> AsyncIterator[EffectRecord]:
        """Mark ``executing`` and commit that before the body runs; record the outcome after."""
        if self.state.phase == "executing":
            raise InterruptedExecution("an effect is already executing in this session", effect=self.state.effect)
        record = EffectRecord(name, request)
        self.state.phase = "executing"
        self.state.effect = {"name": name, "request": request, "started_at": now_ms()}
        await self.save()
        try:
            yield record
        except UNKNOWN_OUTCOME:
            raise  # outcome unknown: stays executing, to be reconciled
        except Exception as error:
            await self._settle("failed", {"error": f"{type(error).__name__}: {error}"})
            raise
        await self._settle("succeeded", {"result": record.result})

    async def _settle(self, outcome: str, detail: dict[str, Any]) -> None:
        self.state.last_effect = {**(self.state.effect or {}), "outcome": outcome, **detail, "ended_at": now_ms()}
        self.state.phase = "idle"
        self.state.effect = None
        await self.save()


class SessionManager:
    """Opens sessions for one compiled runtime configuration (``config_hash``)."""

    def __init__(
        self,
        store: SessionStore,
        config_hash: str,
        ttl_seconds: float = 3600,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
    ) -> None:
        self.store = store
        self.config_hash = config_hash
        self.ttl_seconds = ttl_seconds
        self.history_limit = history_limit

    @contextlib.asynccontextmanager
    async def open(self, id: str) -> AsyncIterator[ManagedSession]:
        """Hold the session's lease, load (or start afresh) its state, save it on a clean exit.

        Raises ``InterruptedExecution`` (with ``.effect``) when the session was left executing,
        ``SessionLocked`` when the lease is not granted in time, ``LeaseLost`` when it is lost.
        """
        check_key(id, "session id")
        async with self.store.hold(id):
            session = ManagedSession(self, id, await self._load(id))
            yield session
            await session.save()

    async def reconcile(self, id: str, outcome: Any) -> SessionState | None:
        """Record what really happened to the interrupted effect and return the session to idle."""
        async with self.store.hold(id):
            state = await self.store.get(id)
            if state is None or state.phase != "executing":
                return state
            session = ManagedSession(self, id, state)
            await session._settle("reconciled", {"result": outcome})
            return session.state

    async def delete(self, id: str, force: bool = False) -> None:
        """Delete the session; one with a pending effect needs ``force=True``."""
        async with self.store.hold(id):
            state = await self.store.get(id)
            if state is not None and state.phase == "executing" and not force:
                raise InterruptedExecution(
                    "session has an effect of unknown outcome; reconcile it or pass force=True",
                    effect=state.effect,
                )
            await self.store.delete(id)

    async def _load(self, id: str) -> SessionState:
        state = await self.store.get(id)
        if state is not None and state.phase == "executing":
            raise InterruptedExecution(
                f"session {id!r} was left executing {(state.effect or {}).get('name')!r}; reconcile it first",
                effect=state.effect,
                session_id=id,
            )
        if state is not None and not state.expired() and state.config_hash == self.config_hash:
            return state
        if state is not None:
            await self.store.delete(id)  # expired or made under other rules: cleared, never continued
        return SessionState(config_hash=self.config_hash, history_limit=self.history_limit)
