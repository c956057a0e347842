"""``Worker``: runs sync agent functions for a server, one invocation per thread, N at a time.

Each of ``concurrency`` threads long-polls ``POST /v0/invocations/claim``, runs the agent with an
``Invocation``, heartbeats from a helper thread every third of the lease (which also brings
``cancel_requested``), then completes, fails or holds. The first SIGINT/SIGTERM asks every thread
to stop after its current invocation (an idle thread stops when its claim long-poll ends); a
second one interrupts at once, and the runs then in flight become ``interrupted`` when their
leases run out.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any

import httpx

from ..errors import KeepstateError
from ..memory import Memory
from . import _core, calls
from ._sync import SyncSender
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
from .invocation import HoldRequested, Invocation, http_state
from .memory_calls import HttpMemoryOps, run_target
from .records import Claim, Run


class HeartbeatThread(threading.Thread):
    """Keeps one invocation's lease alive and mirrors ``cancel_requested`` onto it."""

    def __init__(self, send: Callable[[Any], Any], inv: Invocation) -> None:
        super().__init__(name=f"keepstate-heartbeat-{inv.id}", daemon=True)
        self._send, self._inv = send, inv
        self._done = threading.Event()

    def run(self) -> None:
        interval = self._inv.claim.lease_seconds / 3
        while not self._done.wait(max(0.05, interval)):
            try:
                beat = self._send(calls.heartbeat(self._inv.id, self._inv.claim.token))
            except KeepstateError as error:
                if heartbeat_failed(self._inv, error):
                    return
                continue
            interval = heartbeat_answered(self._inv, beat)

    def stop(self) -> None:
        self._done.set()
        self.join()


class Worker(AgentRegistration):
    """Runs sync agent functions registered with ``@worker.agent(name)`` against a server.

    ``base_url``/``key`` default to ``KEEPSTATE_URL``/``KEEPSTATE_KEY`` (a worker key).
    """

    def __init__(
        self,
        base_url: str | None = None,
        key: str | None = None,
        concurrency: int = 1,
        timeout: float = _core.DEFAULT_TIMEOUT,
        claim_wait: float = DEFAULT_CLAIM_WAIT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = WorkerSettings(base_url, key, 1, timeout, claim_wait)
        self.settings.configure(concurrency=concurrency)
        self._registry = Registry(is_async=False)
        self._transport = transport
        self._stop = threading.Event()
        self._claiming = threading.Event()
        self._fatal: KeepstateError | None = None
        self._sender: SyncSender | None = None
        self._sender_lock = threading.Lock()

    def run(self, stop_after: int | None = None) -> int:
        """Claim and run invocations until stopped (or ``stop_after`` were handled); return how many."""
        agents = self._registry.names()
        self._stop.clear()
        self._claiming.clear()
        self._fatal = None
        budget = Budget(stop_after)
        threads = [
            threading.Thread(target=self._loop, args=(agents, budget), name=f"keepstate-worker-{n}", daemon=True)
            for n in range(self.settings.concurrency)
        ]
        with _graceful_signals(self.stop):
            for thread in threads:
                thread.start()
            self._announce(agents, threads)
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        self.close()
        if self._fatal is not None:
            raise self._fatal
        return budget.used

    def poll_once(self, wait: float = 0.0) -> bool:
        """Claim at most one invocation (waiting up to ``wait`` s) and run it; True when one ran."""
        claim = self._send(calls.claim(self._registry.names(), wait))
        if claim is None:
            return False
        self._execute(claim)
        return True

    def stop(self) -> None:
        """Ask ``run`` to return once the invocations in flight are finished."""
        self._stop.set()

    def close(self) -> None:
        with self._sender_lock:
            sender, self._sender = self._sender, None
        if sender is not None:
            sender.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _send(self, call: Any) -> Any:
        with self._sender_lock:  # threads share one pooled sender: create it once
            if self._sender is None:
                self._sender = SyncSender(self.settings.config(), self._transport)
            sender = self._sender
        return sender.send(call)

    def _announce(self, agents: list[str], threads: list[threading.Thread]) -> None:
        """Log that the worker is claiming once the server answered a claim: a refused key is then one
        error alone, never after a line saying all is well."""
        while not self._claiming.wait(0.2):
            if not any(thread.is_alive() for thread in threads):
                return
        log.info(self.settings.ready_line(agents))

    def _loop(self, agents: list[str], budget: Budget) -> None:
        failures = 0
        wait = 0.0  # the first claim answers at once, so the worker knows its key works before it says so
        while not self._stop.is_set() and budget.take():
            try:
                claim = self._send(calls.claim(agents, wait))
            except KeepstateError as error:
                budget.give_back()
                if is_fatal(error):
                    self._fatal = error
                    self._stop.set()
                    return
                log.warning("claim failed, retrying: %s", error)
                self._stop.wait(_core.backoff(min(failures, 6)) * 5)
                failures += 1
                continue
            failures, wait = 0, self.settings.claim_wait
            self._claiming.set()
            if claim is None:
                budget.give_back()
            else:
                self._execute(claim)

    def _execute(self, claim: Claim) -> None:
        inv = Invocation(
            claim,
            http_state(self._send, claim.token),
            self._child_starter(claim.token),
            Memory(HttpMemoryOps(self._send, run_target(claim.token))),
            lambda events: self._send(calls.emit(claim.id, claim.token, events)),
        )
        fn = self._registry.functions.get(claim.agent)
        beat = HeartbeatThread(self._send, inv)
        beat.start()
        result: Any = None
        error: BaseException | None = None
        try:
            if fn is None:
                raise LookupError(f"this worker has no agent {claim.agent!r}")
            result = fn(inv)
        except (Exception, HoldRequested) as raised:
            error = raised
        finally:
            beat.stop()
        self._finish(claim, result, error)

    def _finish(self, claim: Claim, result: Any, error: BaseException | None) -> None:
        if error is not None and not isinstance(error, HoldRequested):
            log.warning("agent %s raised", claim.agent, exc_info=error)
        try:
            self._send(outcome_call(claim, result, error))
            log.info(describe(claim, error))
        except KeepstateError as refused:
            log.warning("could not report %s: %s", describe(claim, error), refused)

    def _child_starter(self, token: str) -> Callable[[str, Any, str | None, Multitask | None], Run]:
        def start(agent: str, input: Any, session_id: str | None, multitask: Multitask | None) -> Run:
            result: Run = self._send(calls.start_run(agent, input, session_id, None, token=token, multitask=multitask))
            return result

        return start


@contextlib.contextmanager
def _graceful_signals(stop: Callable[[], None]) -> Iterator[None]:
    """In the main thread: the first SIGINT/SIGTERM calls ``stop``, a second one interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def handle(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            raise KeyboardInterrupt
        stopping = True
        log.warning("stopping: finishing the invocations in flight (again to interrupt them)")
        stop()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
