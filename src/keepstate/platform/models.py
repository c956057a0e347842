"""The platform's records: plain frozen dataclasses, free of any storage or HTTP concern.

JSON payloads (run input, output, error, hold request, decision) are kept as canonical JSON bytes
(``keepstate.values``), validated on the way in, so stores never parse them and responses embed
them as they are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import orjson

ROLES = ("admin", "member", "worker")
RUN_STATUSES = ("queued", "running", "done", "failed", "held", "interrupted", "cancelled")
ACTIVE = ("queued", "running")
NULL = b"null"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def loads(data: bytes | None) -> Any:
    return None if data is None else orjson.loads(data)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a request: a key (admin/member/worker) or a run token (``role == "run"``)."""

    env: str
    role: str
    key_id: str
    run: RunContext | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a valid run token stands for: its invocation and the run's coordinates."""

    invocation_id: str
    run_id: str
    env: str
    agent: str
    session_id: str | None
    user: str | None
    owner: str
    lease_until: int


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    env: str
    role: str
    name: str | None
    created_at: int
    revoked: bool = False

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role, "name": self.name, "created_at": self.created_at}


@dataclass(frozen=True, slots=True)
class Session:
    env: str
    id: str
    owner: str
    user: str | None
    metadata: bytes
    created_at: int
    seq: int = 0

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "owner": self.owner, "user": self.user,
                "metadata": orjson.Fragment(self.metadata), "created_at": self.created_at}


@dataclass(frozen=True, slots=True)
class Run:
    env: str
    id: str
    agent: str
    owner: str
    session_id: str | None
    user: str | None
    parent_id: str | None
    status: str
    input: bytes
    created_at: int
    updated_at: int
    output: bytes = NULL
    error: bytes = NULL
    hold: bytes = NULL
    decision: bytes = NULL
    cancel_requested: bool = False
    idempotency_key: str | None = None
    seq: int = 0

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id, "agent": self.agent, "session_id": self.session_id, "user": self.user,
            "parent_id": self.parent_id, "status": self.status, "input": orjson.Fragment(self.input),
            "output": orjson.Fragment(self.output), "error": orjson.Fragment(self.error),
            "hold": orjson.Fragment(self.hold), "decision": orjson.Fragment(self.decision),
            "cancel_requested": self.cancel_requested,
            "created_at": self.created_at, "updated_at": self.updated_at,
        }

    def with_(self, **changes: Any) -> Run:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Invocation:
    """One execution of a run: its start, or a resume after a decision."""

    id: str
    env: str
    run_id: str
    agent: str
    kind: str
    status: str
    created_at: int
    lease_until: int = 0
    token_hash: str | None = None
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Claimed:
    """A claim's answer: the invocation and its run, as they are after the claim."""

    invocation: Invocation
    run: Run
    token: str = ""
    lease_seconds: float = 0.0

    def public(self) -> dict[str, Any]:
        run = self.run
        return {
            "id": self.invocation.id, "run_id": run.id, "agent": run.agent, "kind": self.invocation.kind,
            "input": orjson.Fragment(run.input), "decision": orjson.Fragment(run.decision),
            "session_id": run.session_id, "user": run.user, "parent_id": run.parent_id,
            "token": self.token, "lease_seconds": self.lease_seconds,
        }


@dataclass(frozen=True, slots=True)
class Page:
    """A page of a list and the cursor for the next one (None at the end)."""

    items: list[Any]
    next: str | None
