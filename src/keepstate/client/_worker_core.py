"""The I/O-free part of a worker: the agent registry, configuration, and the call that ends an invocation.

``Worker`` (threads) and ``AsyncWorker`` (asyncio tasks) differ only in how they wait and run
things; what an agent's outcome means — a value completes, ``hold`` holds, an exception fails —
is decided here once.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .. import values
from ..errors import InvalidValue, KeepstateError, Unauthorized
from . import calls
from ._core import Call, Config
from .invocation import HoldRequested, _Facts
from .records import Claim, Heartbeat

log = logging.getLogger("keepstate.worker")

DEFAULT_CLAIM_WAIT = 10.0
"""Seconds one claim long-poll waits; also the longest a stop waits for an idle worker."""
FATAL = ("unauthorized", "forbidden")
"""Claim errors that no amount of waiting fixes: the worker stops and raises them."""


class Budget:
    """How many more invocations a ``run`` may claim (None: no limit). Thread-safe for ``Worker``'s
    threads; on ``AsyncWorker``'s one event loop the lock is never contended."""

    def __init__(self, limit: int | None) -> None:
        self.left, self.used = limit, 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.left is not None and self.left <= 0:
                return False
            self.left = None if self.left is None else self.left - 1
            self.used += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self.left = None if self.left is None else self.left + 1
            self.used -= 1


def heartbeat_answered(inv: _Facts, beat: Heartbeat) -> float:
    """Mirror a heartbeat's answer onto the invocation (as an emit's is); the seconds until the next one."""
    inv._mirror_cancel(beat.cancel_requested)
    return beat.lease_seconds / 3


def heartbeat_failed(inv: _Facts, error: KeepstateError) -> bool:
    """Log a failed heartbeat; True when the lease is lost (the result will be refused: stop beating)."""
    if isinstance(error, Unauthorized):
        inv.lease_lost = True
        log.warning("lease lost for run %s: its result will be refused", inv.run_id)
        return True
    log.warning("heartbeat for run %s failed: %s", inv.run_id, error)
    return False


class Registry:
    """Agent functions by name, checked for the right kind (sync or async) when registered."""

    def __init__(self, is_async: bool) -> None:
        self.functions: dict[str, Callable[..., Any]] = {}
        self.is_async = is_async

    def add(self, name: str, fn: Callable[..., Any]) -> None:
        values.check_key(name, "agent name")
        if inspect.iscoroutinefunction(fn) != self.is_async:
            kind = "an async" if self.is_async else "a sync"
            other = "Worker" if self.is_async else "AsyncWorker"
            raise TypeError(f"agent {name!r}: this worker runs {kind} function; use {other} for the other kind")
        self.functions[name] = fn

    def names(self) -> list[str]:
        if not self.functions:
            raise RuntimeError("no agents registered: decorate a function with @worker.agent(NAME)")
        return sorted(self.functions)


class WorkerSettings:
    """What ``keepstate worker`` may override before ``run``: URL, key, concurrency."""

    def __init__(self, base_url: str | None, key: str | None, concurrency: int, timeout: float, claim_wait: float):
        self.base_url, self.key = base_url, key
        self.concurrency, self.timeout, self.claim_wait = concurrency, timeout, claim_wait
        self.config()  # a malformed URL (given or in KEEPSTATE_URL) is a ValueError now, not at the first claim

    def configure(self, base_url: str | None = None, key: str | None = None, concurrency: int | None = None) -> None:
        """Override settings before ``run`` (flags win over the environment and the constructor)."""
        if base_url:
            Config.build(base_url, key or self.key, self.timeout)
        self.base_url = base_url or self.base_url
        self.key = key or self.key
        if concurrency is not None:
            if concurrency < 1:
                raise ValueError("concurrency must be at least 1")
            self.concurrency = concurrency

    def config(self) -> Config:
        return Config.build(self.base_url, self.key, self.timeout)

    def ready_line(self, agents: list[str]) -> str:
        """What a worker logs once when it starts claiming."""
        return (
            f"claiming invocations of {', '.join(agents)} from {self.config().base_url} "
            f"(concurrency {self.concurrency})"
        )


F = TypeVar("F", bound=Callable[..., Any])


class AgentRegistration:
    """What both workers share: registering agents and overriding settings before ``run``."""

    settings: WorkerSettings
    _registry: Registry

    def agent(self, name: str) -> Callable[[F], F]:
        """Register the decorated function as agent ``name``; it gets an ``Invocation``
        (an ``AsyncInvocation`` on an ``AsyncWorker``)."""

        def register(fn: F) -> F:
            self._registry.add(name, fn)
            return fn

        return register

    @property
    def agents(self) -> dict[str, Callable[..., Any]]:
        return dict(self._registry.functions)

    def configure(self, base_url: str | None = None, key: str | None = None, concurrency: int | None = None) -> None:
        """Override the URL, key or concurrency before ``run`` (the CLI's flags use this)."""
        self.settings.configure(base_url, key, concurrency)


def outcome_call(claim: Claim, result: Any = None, error: BaseException | None = None) -> Call[Any]:
    """The call that ends ``claim``: hold on ``HoldRequested``, fail on an exception, else complete."""
    if isinstance(error, HoldRequested):
        try:
            return calls.hold(claim.id, claim.token, error.request)
        except InvalidValue as bad:
            error = bad
    if error is not None:
        return calls.fail(claim.id, claim.token, type(error).__name__, str(error) or type(error).__name__)
    try:
        return calls.complete(claim.id, claim.token, result)
    except InvalidValue as bad:
        return calls.fail(claim.id, claim.token, "InvalidValue", f"the agent's output is not storable: {bad.message}")


def describe(claim: Claim, error: BaseException | None) -> str:
    what = "held" if isinstance(error, HoldRequested) else "failed" if error is not None else "done"
    return f"{claim.kind} of run {claim.run_id} ({claim.agent}): {what}"


def is_fatal(error: KeepstateError) -> bool:
    return error.code in FATAL
