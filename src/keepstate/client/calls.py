"""Every API call as a ``Call``: path, body, credential, retry safety and how to read the answer.

Built once here and sent by either face (sync or async), so the two cannot drift apart. The writes
the HTTP API makes idempotent (starting a run, a decision, a cancel, an invocation's outcome and its
events) are ``Call.write``s: each carries a fresh ``Idempotency-Key``, so a lost answer is retried
and the write still lands once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from .. import values
from ..errors import InvalidRequest
from ..protocol import MAX_CLAIM_WAIT_S, MAX_RUN_WAIT_S
from ._core import Call, _keep, _none, body, query, segment
from .records import Agent, Claim, Emitted, EventPage, Heartbeat, Key, Run, Session

Multitask = Literal["reject", "enqueue", "interrupt"]
"""What starting a run does while its session has a run queued or running (``Runs.start``)."""

# -- sessions --------------------------------------------------------------------------------


def create_session(id: str | None, user: str | None, metadata: Any) -> Call[Session]:
    # With an explicit id, a repeat by the same owner answers the existing session: safe to retry.
    content = body({"id": id, "user": user, "metadata": metadata})
    return Call("POST", "/v0/sessions", Session.from_dict, content, safe=id is not None)


def fork_session(
    session_id: str, lists: Mapping[str, int] | None, id: str | None, user: str | None, metadata: Any
) -> Call[Session]:
    # With an explicit id, a repeat from the same source answers the fork already made: safe to retry.
    content = body({"id": id, "user": user, "metadata": metadata, "lists": None if lists is None else dict(lists)})
    return Call("POST", f"/v0/sessions/{segment(session_id)}/fork", Session.from_dict, content, safe=id is not None)


def get_session(session_id: str) -> Call[Session]:
    return Call("GET", f"/v0/sessions/{segment(session_id)}", Session.from_dict, safe=True)


def list_sessions(user: str | None, after: str | None, limit: int | None) -> Call[tuple[list[Session], str | None]]:
    def parse(answer: Any) -> tuple[list[Session], str | None]:
        return [Session.from_dict(item) for item in answer.get("sessions", [])], answer.get("next")

    return Call("GET", "/v0/sessions", parse, params=query(user=user, after=after, limit=limit), safe=True)


def update_session(session_id: str, metadata: Any) -> Call[Session]:
    # Replacing the metadata with the same object again changes nothing: safe to retry.
    content = values.encode({"metadata": metadata})
    return Call("PATCH", f"/v0/sessions/{segment(session_id)}", Session.from_dict, content, safe=True)


def delete_session(session_id: str) -> Call[None]:
    return Call("DELETE", f"/v0/sessions/{segment(session_id)}", _none)


# -- runs ------------------------------------------------------------------------------------


def start_run(
    agent: str,
    input: Any,
    session_id: str | None,
    idempotency_key: str | None,
    token: str | None = None,
    queue_timeout: float | None = None,
    multitask: Multitask | None = None,
) -> Call[Run]:
    """Start a run; with a run ``token`` it is a child of the token's run. ``queue_timeout``: seconds it
    may stay queued before it expires (the server's default when None). ``multitask``: what to do while
    the session has a run queued or running (``reject``, the server's default when None; ``enqueue``;
    ``interrupt``)."""
    content = body(
        {
            "agent": agent,
            "input": input,
            "session_id": session_id,
            "idempotency_key": idempotency_key,
            "queue_timeout": queue_timeout,
            "multitask": multitask,
        }
    )
    return Call.write(
        "POST", "/v0/runs", Run.from_dict, content, auth="token" if token is not None else "key", token=token
    )


def get_run(run_id: str, wait: float | None = None) -> Call[Run]:
    """Read a run; with ``wait`` (≤ 60 s) the server answers once it is no longer queued or running."""
    if wait is not None:
        wait = max(0.0, min(MAX_RUN_WAIT_S, float(wait)))
    return Call(
        "GET",
        f"/v0/runs/{segment(run_id)}",
        Run.from_dict,
        params=query(wait=None if wait is None else round(wait, 3)),
        safe=True,
        long_poll=wait or 0.0,
    )


def list_runs(
    session_id: str | None, status: str | None, after: str | None, limit: int | None
) -> Call[tuple[list[Run], str | None]]:
    def parse(answer: Any) -> tuple[list[Run], str | None]:
        return [Run.from_dict(item) for item in answer.get("runs", [])], answer.get("next")

    params = query(session_id=session_id, status=status, after=after, limit=limit)
    return Call("GET", "/v0/runs", parse, params=params, safe=True)


def decide(run_id: str, approved: bool, data: Any) -> Call[Run]:
    content = body({"approved": bool(approved), "data": data})
    return Call.write("POST", f"/v0/runs/{segment(run_id)}/decision", Run.from_dict, content)


def cancel_run(run_id: str) -> Call[Run]:
    return Call.write("POST", f"/v0/runs/{segment(run_id)}/cancel", Run.from_dict)


def run_events(run_id: str, after: int, limit: int | None) -> Call[EventPage]:
    """A page of the run's events after ``after`` (its owner, admins)."""
    params = query(after=after or None, limit=limit)
    return Call("GET", f"/v0/runs/{segment(run_id)}/events", EventPage.from_dict, params=params, safe=True)


# -- agents ----------------------------------------------------------------------------------


def list_agents() -> Call[list[Agent]]:
    def parse(answer: Any) -> list[Agent]:
        return [Agent.from_dict(item) for item in answer.get("agents", [])]

    return Call("GET", "/v0/agents", parse, safe=True)


# -- keys ------------------------------------------------------------------------------------


def create_key(role: str, name: str | None) -> Call[Key]:
    return Call("POST", "/v0/keys", Key.from_dict, body({"role": role, "name": name}))


def list_keys() -> Call[list[Key]]:
    def parse(answer: Any) -> list[Key]:
        return [Key.from_dict(item) for item in answer.get("keys", [])]

    return Call("GET", "/v0/keys", parse, safe=True)


def revoke_key(key_id: str) -> Call[None]:
    return Call("DELETE", f"/v0/keys/{segment(key_id)}", _none)


# -- invocations (worker side) ---------------------------------------------------------------


def claim(agents: list[str], wait: float) -> Call[Claim | None]:
    """Long-poll for an invocation of one of ``agents``; None when none came within ``wait``.

    Not safe to repeat: a claim whose answer is lost would be held by nobody until its lease ends.
    """
    wait = max(0.0, min(MAX_CLAIM_WAIT_S, float(wait)))

    def parse(answer: Any) -> Claim | None:
        return None if answer is None else Claim.from_dict(answer)

    content = body({"agents": agents, "wait": round(wait, 3)})
    return Call("POST", "/v0/invocations/claim", parse, content, long_poll=wait)


def _invocation(invocation_id: str, action: str, token: str, content: bytes | None = None) -> Call[Any]:
    # Its key makes a repeat of one that already landed answer as the first did (not 401: the run token
    # fences the invocation off once it ended), so the worker sees its outcome reported.
    path = f"/v0/invocations/{segment(invocation_id)}/{action}"
    return Call.write("POST", path, _keep, content, auth="token", token=token)


def heartbeat(invocation_id: str, token: str) -> Call[Heartbeat]:
    # Only renews the lease: a repeat does nothing twice.
    path = f"/v0/invocations/{segment(invocation_id)}/heartbeat"
    return Call("POST", path, Heartbeat.from_dict, auth="token", token=token, safe=True)


def complete(invocation_id: str, token: str, output: Any) -> Call[Any]:
    return _invocation(invocation_id, "complete", token, values.encode({"output": output}))


def fail(invocation_id: str, token: str, error_type: str, message: str) -> Call[Any]:
    return _invocation(invocation_id, "fail", token, body({"error": {"type": error_type, "message": message}}))


def hold(invocation_id: str, token: str, request: Any) -> Call[Any]:
    return _invocation(invocation_id, "hold", token, values.encode({"request": request}))


def emit(invocation_id: str, token: str, events: Iterable[Mapping[str, Any]]) -> Call[Emitted]:
    """Append events to the run's log, once: its idempotency key makes a repeat after a lost answer
    answer with the seq of the first, writing nothing."""
    path = f"/v0/invocations/{segment(invocation_id)}/events"
    content = values.encode({"events": [event_item(event) for event in events]})
    return Call.write("POST", path, Emitted.from_dict, content, auth="token", token=token)


def event_item(event: Mapping[str, Any]) -> dict[str, Any]:
    """One item of ``emit_many``: a mapping with ``data`` and, optionally, ``type`` (the server's default,
    ``message``, when absent or None); InvalidRequest for anything else. The type's form and the limits
    (100 a call, 64 KiB of data) are the server's to judge, so its errors come back as they are."""
    if not isinstance(event, Mapping) or "data" not in event or not set(event) <= {"type", "data"}:
        raise InvalidRequest(f"an event is a mapping {{'type'?: str, 'data': value}}, got {event!r:.80}")
    kind = event.get("type")
    if kind is not None and not isinstance(kind, str):
        raise InvalidRequest(f"an event's type is a string, got {kind!r:.80}")
    return {"data": event["data"]} if kind is None else {"type": kind, "data": event["data"]}
