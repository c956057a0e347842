"""``AsyncWorker``: runs async agent functions for a server, ``concurrency`` of them as asyncio tasks.

The same protocol as ``Worker`` (claim long-poll, heartbeat every third of the lease, complete /
fail / hold, graceful stop on the first SIGINT/SIGTERM), with tasks instead of threads. Agent
functions must be ``async def`` and should not block the event loop, or heartbeats stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any

import httpx

from ..errors import KeepstateError
from ..memory import AsyncMemory
from . import _core, calls
from ._async import AsyncSender
from ._worker_core import (
    DEFAULT_CLAIM_WAIT,
    AgentRegistration,
    Budget,
    Registry,
    WorkerSettings,
    describe,
    heartbeat_answered,
    heartbeat_failed,
    is_fatal,
    log,
    outcome_call,
)
from .calls import Multitask
from .invocation import AsyncInvocation, HoldRequested, async_http_state
from .memory_calls import AsyncHttpMemoryOps, run_target
from .records import Claim, Run


async def heartbeat(send: Callable[[Any], Awaitable[Any]], inv: AsyncInvocation, done: asyncio.Event) -> None:
    """Keeps one invocation's lease alive and mirrors ``cancel_requested`` onto it, until ``done``."""
    interval = inv.claim.lease_seconds / 3
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), max(0.05, interval))
        if done.is_set():
            return
        try:
            beat = await send(calls.heartbeat(inv.id, inv.claim.token))
        except KeepstateError as error:
            if heartbeat_failed(inv, error):
                return
            continue
        interval = heartbeat_answered(inv, beat)


class AsyncWorker(AgentRegistration):
    """Runs ``async def`` agent functions registered with ``@worker.agent(name)`` against a server."""

    def __init__(
        self,
        base_url: str | None = None,
        key: str | None = None,
        concurrency: int = 1,
        timeout: float = _core.DEFAULT_TIMEOUT,
        claim_wait: float = DEFAULT_CLAIM_WAIT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = WorkerSettings(base_url, key, 1, timeout, claim_wait)
        self.settings.configure(concurrency=concurrency)
        self._registry = Registry(is_async=True)
        self._transport = transport
        self._stopping = threading.Event()
        self._fatal: KeepstateError | None = None
        self._sender: AsyncSender | None = None

    async def run(self, stop_after: int | None = None) -> int:
        """Claim and run invocations until stopped (or ``stop_after`` were handled); return how many."""
        agents = self._registry.names()
        self._stopping.clear()
        self._fatal = None
        budget = Budget(stop_after)
        try:
            with _graceful_signals(asyncio.get_running_loop(), self.stop):
                claiming = asyncio.Event()
                announce = asyncio.create_task(self._announce(agents, claiming))
                loops = (self._loop(agents, budget, claiming) for _ in range(self.settings.concurrency))
                try:
                    await asyncio.gather(*loops)
                finally:
                    announce.cancel()
        finally:
            await self.aclose()
        if self._fatal is not None:
            raise self._fatal
        return budget.used

    async def poll_once(self, wait: float = 0.0) -> bool:
        """Claim at most one invocation (waiting up to ``wait`` s) and run it; True when one ran."""
        claim = await self._send(calls.claim(self._registry.names(), wait))
        if claim is None:
            return False
        await self._execute(claim)
        return True

    def stop(self) -> None:
        """Ask ``run`` to return once the invocations in flight are finished (callable from any thread)."""
        self._stopping.set()

    async def aclose(self) -> None:
        if self._sender is not None:
            await self._sender.aclose()
            self._sender = None

    async def __aenter__(self) -> AsyncWorker:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    # -- internals ---------------------------------------------------------------------------

    async def _send(self, call: Any) -> Any:
        if self._sender is None:
            self._sender = AsyncSender(self.settings.config(), self._transport)
        return await self._sender.send(call)

    async def _announce(self, agents: list[str], claiming: asyncio.Event) -> None:
        """Log that the worker is claiming once the server answered a claim: a refused key is then one
        error alone, never after a line saying all is well."""
        await claiming.wait()
        log.info(self.settings.ready_line(agents))

    async def _loop(self, agents: list[str], budget: Budget, claiming: asyncio.Event) -> None:
        failures = 0
        wait = 0.0  # the first claim answers at once, so the worker knows its key works before it says so
        while not self._stopping.is_set() and budget.take():
            try:
                claim = await self._send(calls.claim(agents, wait))
            except KeepstateError as error:
                budget.give_back()
                if is_fatal(error):
                    self._fatal = error
                    self._stopping.set()
                    return
                log.warning("claim failed, retrying: %s", error)
                await asyncio.sleep(_core.backoff(min(failures, 6)) * 5)
                failures += 1
                continue
            failures, wait = 0, self.settings.claim_wait
            claiming.set()
            if claim is None:
                budget.give_back()
            else:
                await self._execute(claim)

    async def _execute(self, claim: Claim) -> None:
        inv = AsyncInvocation(
            claim,
            async_http_state(self._send, claim.token),
            self._child_starter(claim.token),
            AsyncMemory(AsyncHttpMemoryOps(self._send, run_target(claim.token))),
            lambda events: self._send(calls.emit(claim.id, claim.token, events)),
        )
        fn = self._registry.functions.get(claim.agent)
        done = asyncio.Event()
        beat = asyncio.create_task(heartbeat(self._send, inv, done))
        result: Any = None
        error: BaseException | None = None
        try:
            if fn is None:
                raise LookupError(f"this worker has no agent {claim.agent!r}")
            result = await fn(inv)
        except (Exception, HoldRequested) as raised:
            error = raised
        finally:
            done.set()
            await beat
        await self._finish(claim, result, error)

    async def _finish(self, claim: Claim, result: Any, error: BaseException | None) -> None:
        if error is not None and not isinstance(error, HoldRequested):
            log.warning("agent %s raised", claim.agent, exc_info=error)
        try:
            await self._send(outcome_call(claim, result, error))
            log.info(describe(claim, error))
        except KeepstateError as refused:
            log.warning("could not report %s: %s", describe(claim, error), refused)

    def _child_starter(self, token: str) -> Callable[[str, Any, str | None, Multitask | None], Awaitable[Run]]:
        async def start(agent: str, input: Any, session_id: str | None, multitask: Multitask | None) -> Run:
            call = calls.start_run(agent, input, session_id, None, token=token, multitask=multitask)
            result: Run = await self._send(call)
            return result

        return start


@contextlib.contextmanager
def _graceful_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> Iterator[None]:
    """In the main thread: the first SIGINT/SIGTERM calls ``stop``, a second one interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def handle() -> None:
        nonlocal stopping
        if stopping:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            return
        stopping = True
        log.warning("stopping: finishing the invocations in flight (again to interrupt them)")
        stop()

    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, handle)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
