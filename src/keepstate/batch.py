"""Atomic batches: writes to several keys and scopes applied together, or none of them.

``with scope.batch() as b:`` (``async with`` for an ``AsyncScope``) queues ``b.put``, ``b.append``,
``b.delete``, ``b.incr``, ``b.patch`` and ``b.trim`` on that scope, and on another scope of the same
store or invocation through ``b.on(other)``. When the block ends without an exception, the queued
writes go to the store as one batch; ``b.results`` then holds one answer per write, as each call
alone answers. A failed ``if_version`` raises ``VersionConflict`` with ``.conflicts`` (every failed
write: ``index``, ``scope``, ``key``, ``current_version``) and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import protocol
from .errors import InvalidRequest
from .ops import Op

if TYPE_CHECKING:
    from .scope import AsyncScope, AsyncScopeOps, Scope, ScopeOps


@dataclass(frozen=True, slots=True)
class Planned:
    """One queued write: the scope ops it targets and the write, the same ``Op`` a call alone makes."""

    target: Any
    op: Op[Any]


class _Plan:
    """The queue of a batch, and the calls that add to it (for the scope ``target``)."""

    def __init__(self, queue: list[Planned], target: Any) -> None:
        self._queue = queue
        self._target = target

    def on(self, other: Scope | AsyncScope) -> _Plan:
        """The same batch, writing to ``other`` (a scope of the same store or invocation)."""
        return _Plan(self._queue, other._ops)

    def put(self, key: str, value: Any, if_version: int | None = None, ttl_seconds: float | None = None) -> None:
        self._add("put", key, value, if_version, protocol.ttl_ms(ttl_seconds))

    def delete(self, key: str, if_version: int | None = None) -> None:
        self._add("delete", key, None, if_version)

    def append(self, key: str, items: list[Any], ttl_seconds: float | None = None) -> None:
        self._add("append", key, items, None, protocol.ttl_ms(ttl_seconds))

    def incr(self, key: str, by: int = 1, if_version: int | None = None, ttl_seconds: float | None = None) -> None:
        self._add("incr", key, protocol.check_by(by), if_version, protocol.ttl_ms(ttl_seconds))

    def patch(self, key: str, patch: Any, if_version: int | None = None, ttl_seconds: float | None = None) -> None:
        self._add("patch", key, patch, if_version, protocol.ttl_ms(ttl_seconds))

    def trim(self, key: str, keep_last: int, if_version: int | None = None, ttl_seconds: float | None = None) -> None:
        self._add("trim", key, protocol.check_keep_last(keep_last), if_version, protocol.ttl_ms(ttl_seconds))

    def _add(self, kind: str, key: str, arg: Any, if_version: int | None, ttl_ms: int | None = None) -> None:
        from .scope import check_if_version

        op: Op[Any] = Op(kind, key, arg, check_if_version(if_version), ttl_ms)
        if len(self._queue) >= protocol.MAX_BATCH_OPS:
            raise InvalidRequest(f"a batch holds at most {protocol.MAX_BATCH_OPS} writes")
        self._queue.append(Planned(self._target, op))


class Batch(_Plan):
    """``with scope.batch() as b:``; ``b.results`` after the block."""

    def __init__(self, ops: ScopeOps) -> None:
        super().__init__([], ops)
        self._ops = ops
        self.results: list[Any] = []

    def __enter__(self) -> Batch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None and self._queue:
            self.results = self._ops.batch(self._queue)


class AsyncBatch(_Plan):
    """``async with scope.batch() as b:``; ``b.results`` after the block."""

    def __init__(self, ops: AsyncScopeOps) -> None:
        super().__init__([], ops)
        self._ops = ops
        self.results: list[Any] = []

    async def __aenter__(self) -> AsyncBatch:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None and self._queue:
            self.results = await self._ops.batch(self._queue)
