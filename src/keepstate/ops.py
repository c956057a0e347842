"""A state write as one value: ``Op``, what a scope hands the layers below it.

``Scope``/``AsyncScope`` check a write's arguments and make it an ``Op`` (``put``, ``delete``,
``append``, ``trim``, ``pop``, ``incr``, ``patch``); a ``ScopeOps`` carries it through one door,
``write(op)``, to where it runs (the store's state facet, the State API over HTTP), so a layer
that only passes writes on holds one method for all of them, and a rule for every write is
written once where the op runs. Each op is typed by its answer (``Op[int]`` for a put's version,
``Op[Appended]`` for an append's version and length), so ``write`` keeps the call's type for mypy.
The constructors below are the only place an op is made with its answer's type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .errors import InvalidRequest
from .values import check_key

if TYPE_CHECKING:
    from .scope import Appended

T = TypeVar("T")

KINDS = ("put", "delete", "append", "trim", "pop", "incr", "patch")
ARGS = {"put": "value", "append": "items", "incr": "by", "patch": "patch", "trim": "keep_last"}
"""The body field of each kind's own argument (``Op.arg``), as the State API's bodies name it."""


class Op(Generic[T]):
    """One write of one key, its arguments checked by ``Scope``; ``T`` is what it answers.

    ``arg`` is the write's own argument: the value (``put``), the items (``append``), the step
    (``incr``), the merge patch (``patch``), how many items remain (``trim``); None otherwise."""

    __slots__ = ("arg", "encoded", "idempotency_key", "if_version", "key", "kind", "ttl_ms")

    def __init__(
        self, kind: str, key: str, arg: Any = None, if_version: int | None = None, ttl_ms: int | None = None
    ) -> None:
        self.kind, self.key, self.arg, self.if_version, self.ttl_ms = kind, key, arg, if_version, ttl_ms
        self.idempotency_key: str | None = None
        """Apply this write once per key: a repeat answers the first answer (``Scope``'s ``idempotency_key=``)."""
        self.encoded: Any = None
        """``arg`` as the store takes it, once made (``writes.encoded``): a keyed write's fingerprint reads it too."""

    def keyed(self, idempotency_key: str | None) -> Op[T]:
        """This op with its idempotency key (checked: the key charset), or as it is for None."""
        if idempotency_key is not None:
            self.idempotency_key = check_key(idempotency_key, "idempotency_key")
        return self

    def __repr__(self) -> str:
        return f"Op({self.kind!r}, {self.key!r}, if_version={self.if_version}, ttl_ms={self.ttl_ms})"


def unknown(kind: object) -> InvalidRequest:
    """The refusal of an op kind no layer knows, the same at every door."""
    return InvalidRequest(f"op must be one of {', '.join(KINDS)}, got {kind!r:.40}")


def put(key: str, value: Any, if_version: int | None, ttl_ms: int | None) -> Op[int]:
    return Op("put", key, value, if_version, ttl_ms)


def delete(key: str, if_version: int | None) -> Op[None]:
    return Op("delete", key, None, if_version)


def append(key: str, items: list[Any], ttl_ms: int | None) -> Op[Appended]:
    return Op("append", key, items, None, ttl_ms)


def trim(key: str, keep_last: int, if_version: int | None, ttl_ms: int | None) -> Op[Appended]:
    return Op("trim", key, keep_last, if_version, ttl_ms)


def pop(key: str, if_version: int | None) -> Op[Any]:
    return Op("pop", key, None, if_version)


def incr(key: str, by: int, if_version: int | None, ttl_ms: int | None) -> Op[int]:
    return Op("incr", key, by, if_version, ttl_ms)


def patch(key: str, merge_patch: Any, if_version: int | None, ttl_ms: int | None) -> Op[Any]:
    return Op("patch", key, merge_patch, if_version, ttl_ms)
