"""The State API's calls as ``Call``s, for any state target: a run token's scope or a caller's prefix.

A ``StateTarget`` is where one scope's state lives over HTTP: ``/v0/state/{scope}`` with the run
token (an agent), or a caller's prefix (``/v0/sessions/{id}/state/{agent}``, …) with the client's key.
Values are checked and sized here as the embedded store checks them, so a bad value never leaves the
process; the server checks again. Every write (and a batch) is a ``Call.write``: it carries its own
``Idempotency-Key``, so it is retried after a lost answer and still applied once — a ``pop`` pops one
item and answers it, however many attempts reach the server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import orjson

from .. import ops, protocol, values
from ..batch import Planned
from ..errors import InvalidRequest
from ..ops import Op
from ..scope import Appended, Items, Page, Versioned
from ._core import Call, _none, query, segment

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StateTarget:
    """One scope's state over HTTP: its path prefix (segments already quoted) and its credential."""

    prefix: str
    auth: Literal["key", "token"] = "key"
    token: str | None = None
    scope: str | None = None
    """The run token's scope name, for batches (only run-token scopes batch)."""

    @classmethod
    def of_run(cls, scope: str, token: str) -> StateTarget:
        return cls(f"/v0/state/{segment(scope)}", "token", token, scope)

    @classmethod
    def of_caller(cls, *parts: str) -> StateTarget:
        """``of_caller("sessions", id, "state", agent)`` → ``/v0/sessions/{id}/state/{agent}``."""
        return cls("/v0/" + "/".join(segment(part) for part in parts))

    def key_path(self, key: str, action: str = "") -> str:
        return f"{self.prefix}/{segment(values.check_key(key))}" + (f"/{action}" if action else "")

    def read(self, path: str, parse: Any, params: dict[str, str] | None = None, absent: Any = None) -> Call[Any]:
        return Call("GET", path, parse, safe=True, **self._fields(params, absent))

    def write(
        self,
        method: str,
        path: str,
        parse: Any,
        content: bytes | None = None,
        params: dict[str, str] | None = None,
        absent: Any = None,
    ) -> Call[Any]:
        """A write to this scope, with its own idempotency key (``Call.write``)."""
        return Call.write(method, path, parse, content, **self._fields(params, absent))

    def _fields(self, params: dict[str, str] | None, absent: Any) -> dict[str, Any]:
        return {
            "params": params or {},
            "auth": self.auth,
            "token": self.token,
            "absent": absent,
            "absent_names_key": self.auth == "key",
        }


def _body(fields: dict[str, Any]) -> bytes:
    """A write's JSON body from already encoded pieces (``bytes``) and plain fields, None fields left out."""
    parts = []
    for name, value in fields.items():
        if value is None:
            continue
        encoded = value if isinstance(value, bytes) else orjson.dumps(value)
        parts.append(b'"' + name.encode() + b'":' + encoded)
    return b"{" + b",".join(parts) + b"}"


def _ttl_seconds(ttl_ms: int | None) -> float | None:
    return None if ttl_ms is None else ttl_ms / 1000


def _value(value: Any) -> bytes:
    data = values.encode(value)
    values.check_size(len(data))
    return data


def _items(items: list[Any]) -> bytes:
    return b"[" + b",".join(values.encode_items(items)) + b"]"


def _appended(answer: Any) -> Appended:
    return Appended(int(answer["version"]), int(answer["length"]))


def _list(answer: Any) -> Items:
    return Items(list(answer["items"]), int(answer["version"]), int(answer["length"]))


def get(target: StateTarget, key: str) -> Call[Versioned]:
    def parse(answer: Any) -> Versioned:
        return Versioned(answer.get("value"), int(answer["version"]))

    return target.read(target.key_path(key), parse, absent=lambda: Versioned(None, 0))


def expires_at(target: StateTarget, key: str) -> Call[int | None]:
    def parse(answer: Any) -> int | None:
        found = answer.get("expires_at")
        return None if found is None else int(found)

    return target.read(target.key_path(key), parse, absent=lambda: None)


def put(target: StateTarget, key: str, value: Any, if_version: int | None, ttl_ms: int | None) -> Call[int]:
    content = _body({"value": _value(value), "if_version": if_version, "ttl_seconds": _ttl_seconds(ttl_ms)})
    return target.write("PUT", target.key_path(key), _version, content)


def delete(target: StateTarget, key: str, if_version: int | None) -> Call[None]:
    return target.write("DELETE", target.key_path(key), _none, params=query(if_version=if_version))


def append(target: StateTarget, key: str, items: list[Any], ttl_ms: int | None) -> Call[Appended]:
    content = _body({"items": _items(items), "ttl_seconds": _ttl_seconds(ttl_ms)})
    return target.write("POST", target.key_path(key, "append"), _appended, content)


def keys(target: StateTarget, prefix: str, after: str, limit: int) -> Call[Page]:
    def parse(answer: Any) -> Page:
        page = [(str(item["key"]), int(item["version"])) for item in answer.get("keys", [])]
        return page, answer.get("next")

    params = query(prefix=prefix or None, after=after or None, limit=limit)
    return target.read(target.prefix + "/", parse, params=params)


def tail(target: StateTarget, key: str, n: int) -> Call[Items]:
    return target.read(target.key_path(key), _list, params=query(tail=n), absent=lambda: Items([], 0, 0))


def items(target: StateTarget, key: str, start: int, limit: int) -> Call[Items]:
    return target.read(
        target.key_path(key), _list, params=query(start=start, limit=limit), absent=lambda: Items([], 0, 0)
    )


def trim(target: StateTarget, key: str, keep_last: int, if_version: int | None, ttl_ms: int | None) -> Call[Appended]:
    content = _body({"keep_last": keep_last, "if_version": if_version, "ttl_seconds": _ttl_seconds(ttl_ms)})
    return target.write("POST", target.key_path(key, "trim"), _appended, content)


def pop(target: StateTarget, key: str, if_version: int | None) -> Call[Any]:
    content = _body({"if_version": if_version})
    return target.write("POST", target.key_path(key, "pop"), lambda a: a.get("item"), content, absent=lambda: None)


def incr(target: StateTarget, key: str, by: int, if_version: int | None, ttl_ms: int | None) -> Call[int]:
    content = _body({"by": by, "if_version": if_version, "ttl_seconds": _ttl_seconds(ttl_ms)})
    return target.write("POST", target.key_path(key, "incr"), _counted, content)


def patch(target: StateTarget, key: str, merge: Any, if_version: int | None, ttl_ms: int | None) -> Call[Any]:
    content = _body({"patch": values.encode(merge), "if_version": if_version, "ttl_seconds": _ttl_seconds(ttl_ms)})
    return target.write("PATCH", target.key_path(key), _patched, content)


def write(target: StateTarget, op: Op[T]) -> Call[T]:
    """The State API call of one write (its own route: a put is a ``PUT``, an append a ``POST …/append``).
    Its ``Idempotency-Key`` is the op's own when the caller gave one (``idempotency_key=``, to repeat a
    write across calls or processes), else the fresh one of its ``Call.write``."""
    make = _WRITES.get(op.kind)
    if make is None:
        raise ops.unknown(op.kind)
    call: Call[T] = make(target, op)
    if op.idempotency_key is not None:
        call = dataclasses.replace(call, idempotency_key=op.idempotency_key)
    return call


_WRITES: dict[str, Callable[[StateTarget, Op[Any]], Call[Any]]] = {
    "put": lambda t, op: put(t, op.key, op.arg, op.if_version, op.ttl_ms),
    "delete": lambda t, op: delete(t, op.key, op.if_version),
    "append": lambda t, op: append(t, op.key, op.arg, op.ttl_ms),
    "trim": lambda t, op: trim(t, op.key, op.arg, op.if_version, op.ttl_ms),
    "pop": lambda t, op: pop(t, op.key, op.if_version),
    "incr": lambda t, op: incr(t, op.key, op.arg, op.if_version, op.ttl_ms),
    "patch": lambda t, op: patch(t, op.key, op.arg, op.if_version, op.ttl_ms),
}


def _version(answer: Any) -> int:
    return int(answer["version"])


def _counted(answer: Any) -> int:
    return int(answer["value"])


def _patched(answer: Any) -> Any:
    return answer.get("value")


_ANSWERS: dict[str, Callable[[Any], Any]] = {
    "put": _version,
    "delete": _none,
    "append": _appended,
    "trim": _appended,
    "incr": _counted,
    "patch": _patched,
}


def batch(token: str, planned: Sequence[Planned], targets: Sequence[StateTarget]) -> Call[list[Any]]:
    """``POST /v0/state/batch`` of writes to scopes of one run token."""
    bodies = []
    for index, (plan, target) in enumerate(zip(planned, targets, strict=True)):
        if target.auth != "token" or target.token != token or target.scope is None:
            raise InvalidRequest("a batch writes to the scopes of one invocation", index=index)
        bodies.append(_op(plan.op, target.scope))
    if not 1 <= len(bodies) <= protocol.MAX_BATCH_OPS:
        raise InvalidRequest(f"a batch has 1 to {protocol.MAX_BATCH_OPS} writes")
    content = b'{"ops":[' + b",".join(bodies) + b"]}"

    def parse(answer: Any) -> list[Any]:
        return [_ANSWERS[plan.op.kind](result) for plan, result in zip(planned, answer["results"], strict=True)]

    return Call.write("POST", "/v0/state/batch", parse, content, auth="token", token=token)


def _op(op: Op[Any], scope: str) -> bytes:
    """One op of a batch's body: its kind, scope and key, its own argument encoded, its conditions."""
    encoded: dict[str, Any] = {"op": op.kind, "scope": scope, "key": values.check_key(op.key)}
    if op.kind in ops.ARGS:
        encoded[ops.ARGS[op.kind]] = _ARG_ENCODERS.get(op.kind, _plain)(op.arg)
    encoded["ttl_seconds"] = _ttl_seconds(op.ttl_ms)
    encoded["if_version"] = op.if_version
    return _body(encoded)


_ARG_ENCODERS: dict[str, Callable[[Any], Any]] = {"put": _value, "append": _items, "patch": values.encode}


def _plain(arg: Any) -> Any:
    return arg
