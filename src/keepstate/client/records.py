"""The records the HTTP API answers with, as frozen dataclasses.

Parsing is tolerant on purpose: fields the spec names are read (absent ones become None), fields a
newer server adds are ignored, so an older SDK keeps working against a newer server.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

R = TypeVar("R")


def _from_dict(cls: type[R], data: Any) -> R:
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object for {cls.__name__}, got {type(data).__name__}")
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    return cls(**{name: data.get(name) for name in names})


@dataclass(frozen=True, slots=True)
class Session:
    """A session: the runs (turns) of one conversation. ``owner`` is the id of the key that created it."""

    id: str
    owner: str | None
    user: str | None
    metadata: Any
    created_at: int | None

    @classmethod
    def from_dict(cls, data: Any) -> Session:
        return _from_dict(cls, data)


@dataclass(frozen=True, slots=True)
class Run:
    """One turn. ``status``: queued, running, done, failed, held, interrupted, cancelled or expired
    (no worker took it within its ``queue_timeout``)."""

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

    @classmethod
    def from_dict(cls, data: Any) -> Run:
        return _from_dict(cls, data)

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
class Heartbeat:
    """The answer to a heartbeat: the lease granted and whether a cancel was requested."""

    lease_seconds: float
    cancel_requested: bool

    @classmethod
    def from_dict(cls, data: Any) -> Heartbeat:
        return Heartbeat(float(data.get("lease_seconds") or 30), bool(data.get("cancel_requested")))
