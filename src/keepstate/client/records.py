"""The records the HTTP API answers with, as frozen dataclasses.

Parsing is tolerant on purpose: fields the spec names are read (absent ones become None), fields a
newer server adds are ignored, so an older SDK keeps working against a newer server.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields, replace
from typing import Any, TypeVar

R = TypeVar("R")


def _from_dict(cls: type[R], data: Any) -> R:
    """``cls`` from the fields of ``data`` it names; a field absent (or null) takes its default, else None."""
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object for {cls.__name__}, got {type(data).__name__}")
    found = {}
    for field in fields(cls):  # type: ignore[arg-type]
        value = data.get(field.name)
        if value is not None or field.default is MISSING:
            found[field.name] = value
    return cls(**found)


@dataclass(frozen=True, slots=True)
class Session:
    """A session: the runs (turns) of one conversation. ``owner`` is the id of the key that created it;
    ``parent`` the id of the session it was forked from (None when not forked)."""

    id: str
    owner: str | None
    user: str | None
    metadata: Any
    created_at: int | None
    parent: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Session:
        return _from_dict(cls, data)


@dataclass(frozen=True, slots=True)
class Run:
    """One turn. ``status``: queued, running, done, failed, held, interrupted, cancelled or expired
    (no worker took it within its ``queue_timeout``).

    ``cancel_requested``: a cancel was asked while it was running; its worker sees it at the next heartbeat.
    ``queue_deadline``: while it is queued, when it expires (ms since the epoch)."""

    id: str
    agent: str
    session_id: str | None
    user: str | None
    parent_id: str | None
    status: str
    input: Any
    output: Any
    error: Any
    hold: Any
    decision: Any
    created_at: int | None
    updated_at: int | None
    cancel_requested: bool = False
    queue_deadline: int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Run:
        run = _from_dict(cls, data)
        if isinstance(run.cancel_requested, bool):
            return run
        return replace(run, cancel_requested=bool(run.cancel_requested))

    @property
    def finished(self) -> bool:
        """True once the run is no longer queued or running: done, failed, interrupted, cancelled, expired,
        and held (finished for now: a decision queues it again)."""
        return self.status not in ("queued", "running")


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent of the environment: when a worker last claimed for it (None: never) and its active runs."""

    name: str
    last_claim_at: int | None
    queued: int
    running: int
    held: int

    @classmethod
    def from_dict(cls, data: Any) -> Agent:
        return _from_dict(cls, data)


@dataclass(frozen=True, slots=True)
class Key:
    """An API key. ``key`` (the secret) is only set on the answer to ``keys.create``: it is shown once."""

    id: str
    role: str
    name: str | None
    created_at: int | None = None
    key: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Key:
        return _from_dict(cls, data)


@dataclass(frozen=True, slots=True)
class Claim:
    """An invocation a worker claimed: one execution of a run (its start, or a resume)."""

    id: str
    run_id: str
    agent: str
    kind: str
    input: Any
    decision: Any
    session_id: str | None
    user: str | None
    parent_id: str | None
    token: str
    lease_seconds: float

    @classmethod
    def from_dict(cls, data: Any) -> Claim:
        return _from_dict(cls, data)


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run's log. ``seq`` counts 1, 2, 3… per run across its invocations; ``type`` is the
    emitter's (``message`` by default) or the platform's (``run.status`` ``{status}``, ``run.output``
    ``{output}``); ``at`` is the server's time (ms since the epoch)."""

    seq: int
    type: str
    data: Any
    at: int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> RunEvent:
        event = _from_dict(cls, data)
        return event if isinstance(event.seq, int) else replace(event, seq=int(event.seq))

    @property
    def final(self) -> bool:
        """True for the ``run.status`` event that ends the run: done, failed, cancelled, expired or
        interrupted (not held: a decision resumes a held run)."""
        return self.type == "run.status" and isinstance(self.data, dict) and ended(self.data.get("status"))


def ended(status: Any) -> bool:
    """A run in ``status`` will not run again: done, failed, cancelled, expired, interrupted."""
    return isinstance(status, str) and status not in ("queued", "running", "held")


@dataclass(frozen=True, slots=True)
class EventPage:
    """A page of a run's events, oldest first; ``next`` is the ``after`` of the next page, None on the last."""

    events: list[RunEvent]
    next: int | None

    @classmethod
    def from_dict(cls, data: Any) -> EventPage:
        if not isinstance(data, dict):
            raise TypeError(f"expected a JSON object for EventPage, got {type(data).__name__}")
        following = data.get("next")
        return cls([RunEvent.from_dict(item) for item in data.get("events") or []], _seq(following))


def _seq(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class Emitted:
    """The answer to an emit: the last ``seq`` written and whether a cancel was requested."""

    seq: int
    cancel_requested: bool

    @classmethod
    def from_dict(cls, data: Any) -> Emitted:
        return Emitted(int(data.get("seq") or 0), bool(data.get("cancel_requested")))


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The answer to a heartbeat: the lease granted and whether a cancel was requested."""

    lease_seconds: float
    cancel_requested: bool

    @classmethod
    def from_dict(cls, data: Any) -> Heartbeat:
        return Heartbeat(float(data.get("lease_seconds") or 30), bool(data.get("cancel_requested")))
