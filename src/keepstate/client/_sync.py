"""The synchronous face: ``Client`` and its ``sessions``/``runs``/``keys``, and the sender under them.

Only the calls live here: every request is described by ``calls`` and judged by ``_core``; this
module sends it over one pooled ``httpx.Client``, sleeps between attempts, and pages lists.
``_async.py`` is the same shape with ``await``; a parity test keeps their method names aligned.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Generator, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from ..errors import KeepstateError, StoreClosed
from ..memory import Memory
from ..scope import Scope
from . import _core, calls
from ._core import Call, Config
from ._events import EventStream, dropped
from .invocation import HttpOps
from .memory_calls import CallerMemory, HttpMemoryOps
from .records import Agent, EventPage, Key, Run, RunEvent, Session
from .state_calls import StateTarget

T = TypeVar("T")


class SyncSender:
    """Sends ``Call``s over one ``httpx.Client`` (thread-safe, connections reused), with retries."""

    def __init__(self, config: Config, transport: httpx.BaseTransport | None = None) -> None:
        self.config = config
        self.http = httpx.Client(transport=transport, **config.client_options())

    def client(self) -> httpx.Client:
        """The pooled ``httpx.Client``; ``StoreClosed`` once it was closed."""
        if self.http.is_closed:
            raise StoreClosed("this Client is closed: make a new one to use it")
        return self.http

    def send(self, call: Call[T]) -> T:
        http = self.client()
        attempt = 0
        while True:
            delay = None
            try:
                response = http.request(**call.request(self.config))
            except httpx.TransportError as error:
                delay = _core.retry_after_error(call, attempt, error, self.config)
                if delay is None:
                    raise _core.transport_error(error, self.config) from error
            else:
                delay = _core.retry_after_status(call, attempt, response, self.config)
                if delay is None:
                    return _core.finish(call, response.status_code, response.content)
            time.sleep(delay)
            attempt += 1

    def close(self) -> None:
        self.http.close()


class Sessions:
    """``client.sessions``: the conversations this key owns (an admin: all of its environment)."""

    def __init__(self, sender: SyncSender) -> None:
        self._send = sender.send

    def create(self, id: str | None = None, user: str | None = None, metadata: Any = None) -> Session:
        """Create a session; the same ``id`` again by its owner answers the existing one."""
        return self._send(calls.create_session(id, user, metadata))

    def fork(
        self,
        session_id: str,
        lists: Mapping[str, int] | None = None,
        id: str | None = None,
        user: str | None = None,
        metadata: Any = None,
    ) -> Session:
        """A new session of this key, ``parent`` the source, holding a copy of the source's session-scope
        state (every agent's) as of one instant; each list named in ``lists`` (``{"AGENT/KEY": N}``) is cut
        to its first N items there. ``user`` defaults to the source's. NotAList (and no session) when a
        named key holds another value; NotFound for a session this key may not see."""
        return self._send(calls.fork_session(session_id, lists, id, user, metadata))

    def get(self, session_id: str) -> Session:
        """The session, or NotFound (also for one this key may not see)."""
        return self._send(calls.get_session(session_id))

    def list(self, user: str | None = None, after: str | None = None, limit: int | None = None) -> Iterator[Session]:
        """Sessions oldest first, fetched page by page; at most ``limit`` of them when given."""
        remaining = limit
        while remaining is None or remaining > 0:
            page, after = self._send(calls.list_sessions(user, after, remaining))
            yield from page[:remaining]
            remaining = None if remaining is None else remaining - len(page)
            if after is None or not page:
                return

    def update(self, session_id: str, metadata: Any) -> Session:
        """Replace the session's metadata (an object, at most 1 MiB); NotFound for one this key may not see."""
        return self._send(calls.update_session(session_id, metadata))

    def delete(self, session_id: str) -> None:
        """Delete the session and its session-scope state; SessionBusy while a run of it is active."""
        self._send(calls.delete_session(session_id))


class Runs:
    """``client.runs``: start turns, wait for them, decide held ones, cancel, read their events."""

    def __init__(self, sender: SyncSender) -> None:
        self._sender = sender
        self._send = sender.send

    def start(
        self,
        agent: str,
        input: Any = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        queue_timeout: float | None = None,
        multitask: calls.Multitask | None = None,
    ) -> Run:
        """Queue a run. ``queue_timeout`` (seconds, 1-86400; the server's default, 600, when None): still
        queued that long, it expires. ``multitask`` says what happens while another turn of the session is
        queued or running: ``"reject"`` (the default) raises SessionBusy; ``"enqueue"`` queues the run to
        start once the turns before it are done; ``"interrupt"`` cancels the session's queued turns, asks
        its running one to stop (its worker sees ``cancel_requested``), and queues the run behind it."""
        call = calls.start_run(
            agent, input, session_id, idempotency_key, queue_timeout=queue_timeout, multitask=multitask
        )
        return self._send(call)

    def get(self, run_id: str) -> Run:
        return self._send(calls.get_run(run_id))

    def wait(self, run_id: str, timeout: float = 30) -> Run:
        """The run once it is no longer queued or running, or as it is when ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        run = self._send(calls.get_run(run_id, wait=timeout))
        while not run.finished and (left := deadline - time.monotonic()) > 0:
            run = self._send(calls.get_run(run_id, wait=left))
        return run

    def list(
        self,
        session_id: str | None = None,
        status: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Run]:
        """Runs oldest first, fetched page by page; at most ``limit`` of them when given."""
        remaining = limit
        while remaining is None or remaining > 0:
            page, after = self._send(calls.list_runs(session_id, status, after, remaining))
            yield from page[:remaining]
            remaining = None if remaining is None else remaining - len(page)
            if after is None or not page:
                return

    def decide(self, run_id: str, approved: bool, data: Any = None) -> Run:
        """Answer a held run; it is queued again for its resume. NotHeld when it is not held."""
        return self._send(calls.decide(run_id, approved, data))

    def cancel(self, run_id: str) -> Run:
        """Cancel: a queued or held run now; a running one is asked to stop at its next heartbeat."""
        return self._send(calls.cancel_run(run_id))

    def events(self, run_id: str, after: int = 0, limit: int | None = None) -> EventPage:
        """A page of the run's events with a seq past ``after``, oldest first; ``.next`` is the ``after``
        of the next page (None on the last). NotFound for a run this key may not see."""
        return self._send(calls.run_events(run_id, after, limit))

    def stream(self, run_id: str, after: int = 0) -> Generator[RunEvent, None, None]:
        """The run's events past ``after`` as they are written, each once and in seq order, until the run
        has ended (done, failed, cancelled, expired, interrupted; a held run's stream waits through the
        hold). A dropped connection is made again by itself from the last seq yielded (``_events.py``).
        ``close()`` the iterator (or drop it: leave a ``for`` loop over ``runs.stream(...)``) to close the
        connection."""
        stream = EventStream(self._sender.config, run_id, after)
        while True:
            try:
                yield from self._connection(stream)
                if stream.closed_cleanly():
                    return
                if stream.needs_check() and stream.checked(self.get(run_id)):
                    yield from self._drain(stream)
                    return
                delay = stream.retry_in()
            except KeepstateError as error:
                delay = stream.retry_in(error)
            time.sleep(delay)

    def _connection(self, stream: EventStream) -> Generator[RunEvent, None, None]:
        path, params, headers = stream.request()
        try:
            with self._sender.client().stream(
                "GET", path, params=params, headers=headers, timeout=stream.timeout()
            ) as response:
                refusal = response.read() if response.status_code != 200 else b""
                stream.opened(response.status_code, response.headers.get("content-type"), refusal)
                for chunk in response.iter_bytes():
                    yield from stream.feed(chunk)
        except httpx.TransportError as error:
            raise dropped(error, self._sender.config) from error

    def _drain(self, stream: EventStream) -> Generator[RunEvent, None, None]:
        while True:
            fresh, last = stream.drained(self._send(stream.drain_call()))
            yield from fresh
            if last:
                return


class Agents:
    """``client.agents``: the agents of the environment, as workers and runs show them."""

    def __init__(self, sender: SyncSender) -> None:
        self._send = sender.send

    def list(self) -> builtins.list[Agent]:
        """Every agent a worker claimed for or that has runs: last claim, queued, running and held runs."""
        return self._send(calls.list_agents())


class Keys:
    """``client.keys`` (admin): create, list and revoke the keys of the environment."""

    def __init__(self, sender: SyncSender) -> None:
        self._send = sender.send

    def create(self, role: str, name: str | None = None) -> Key:
        """A new key of ``role`` (admin, member, worker); its secret is in ``.key``, shown only now."""
        return self._send(calls.create_key(role, name))

    def list(self) -> builtins.list[Key]:
        return self._send(calls.list_keys())

    def revoke(self, id: str) -> None:
        """Revoke a key: it is refused (Unauthorized) from then on."""
        self._send(calls.revoke_key(id))


class CallerState:
    """``client.state``: state read and written with the client's key ("State for callers"), the same
    scope calls and errors as an agent's; 404 for a session or run this key may not see, 403 for a
    member on the agent and user scopes."""

    def __init__(self, sender: SyncSender) -> None:
        self._send = sender.send

    def session(self, session_id: str, agent: str) -> Scope:
        """The session-scope state of one agent in a session (its owner, admins)."""
        return self._scope("sessions", session_id, "state", agent)

    def run(self, run_id: str) -> Scope:
        """A run's run-scope state, of its agent (its owner, admins)."""
        return self._scope("runs", run_id, "state")

    def agent(self, agent: str) -> Scope:
        """An agent's agent-scope state (admins)."""
        return self._scope("agents", agent, "state")

    def user(self, user: str, agent: str) -> Scope:
        """An end user's user-scope state of one agent (admins)."""
        return self._scope("users", user, "state", agent)

    def _scope(self, *parts: str) -> Scope:
        return Scope(HttpOps(self._send, StateTarget.of_caller(*parts)))


class Client:
    """The caller's side of the HTTP API, synchronous. Use as a context manager or ``close()`` it.

    ``base_url`` and ``key`` default to ``KEEPSTATE_URL`` and ``KEEPSTATE_KEY``; ``transport`` is
    any ``httpx`` transport (``httpx.MockTransport`` in tests).
    """

    def __init__(
        self,
        base_url: str | None = None,
        key: str | None = None,
        timeout: float = _core.DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        retries: int = _core.DEFAULT_RETRIES,
    ) -> None:
        self.config = Config.build(base_url, key, timeout, retries)
        self._sender = SyncSender(self.config, transport)
        self.sessions = Sessions(self._sender)
        self.runs = Runs(self._sender)
        self.keys = Keys(self._sender)
        self.state = CallerState(self._sender)
        self.memory: CallerMemory[Memory] = CallerMemory(
            lambda target: Memory(HttpMemoryOps(self._sender.send, target))
        )
        self.agents = Agents(self._sender)

    @property
    def base_url(self) -> str:
        return self.config.base_url

    def close(self) -> None:
        self._sender.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
