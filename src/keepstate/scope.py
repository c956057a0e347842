"""State scopes: the calls an agent makes, on any store, embedded or over HTTP.

A ``Scope`` holds the rules that do not depend on where state lives (the compare-and-set loop of
``update``, paging of ``keys``, defaults, checking arguments); a ``ScopeOps`` object does the
primitive calls, either straight on a store (``embedded.StoreOps``) or over HTTP
(``keepstate.client``): reads by name, every write as one ``ops.Op`` through ``write``.
``AsyncScope`` is the same over awaitable ops, for async agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from . import ops, protocol, values
from .errors import InvalidRequest, KeepstateError, VersionConflict
from .ops import Op
from .stores.records import CONSOLE_SESSIONS, SCOPE_KINDS, namespace

if TYPE_CHECKING:
    from .batch import AsyncBatch, Batch, Planned

UPDATE_TRIES = 64
T = TypeVar("T")


class Versioned(NamedTuple):
    """A value and its version; ``(None, 0)`` for an absent key."""

    value: Any
    version: int


class Appended(NamedTuple):
    """What an append (or a trim) returns: the list's new version and length."""

    version: int
    length: int


class Items(NamedTuple):
    """Part of a list, and the whole list's version and length (``([], 0, 0)`` for an absent key)."""

    items: list[Any]
    version: int
    length: int


Page = tuple[list[tuple[str, int]], str | None]


class ScopeOps(Protocol):
    """The primitive calls of one scope, with arguments already checked by ``Scope``."""

    def get_versioned(self, key: str) -> Versioned: ...
    def expires_at(self, key: str) -> int | None: ...
    def write(self, op: Op[T]) -> T: ...
    def keys_page(self, prefix: str, after: str, limit: int) -> Page: ...
    def tail(self, key: str, n: int) -> Items: ...
    def items(self, key: str, start: int, limit: int) -> Items: ...
    def batch(self, planned: Sequence[Planned]) -> list[Any]: ...


class AsyncScopeOps(Protocol):
    """``ScopeOps``, awaited."""

    async def get_versioned(self, key: str) -> Versioned: ...
    async def expires_at(self, key: str) -> int | None: ...
    async def write(self, op: Op[T]) -> T: ...
    async def keys_page(self, prefix: str, after: str, limit: int) -> Page: ...
    async def tail(self, key: str, n: int) -> Items: ...
    async def items(self, key: str, start: int, limit: int) -> Items: ...
    async def batch(self, planned: Sequence[Planned]) -> list[Any]: ...


def backoff_seconds(attempt: int) -> float:
    """Jittered exponential backoff for compare-and-set retries, capped at 50 ms."""
    return random.uniform(0, min(0.05, 0.0005 * 2**attempt))


def _conflict_after_tries(key: str) -> VersionConflict:
    return VersionConflict(f"update of {key!r} kept conflicting after {UPDATE_TRIES} tries")


class Scope:
    """One scope's state: values with versions, lists, counters and merge patches, in one place."""

    def __init__(self, ops: ScopeOps) -> None:
        self._ops = ops

    def get(self, key: str, default: Any = None) -> Any:
        """The value, or ``default`` when the key is absent."""
        found = self._ops.get_versioned(key)
        return default if found.version == 0 else found.value

    def get_versioned(self, key: str) -> Versioned:
        return self._ops.get_versioned(key)

    def expires_at(self, key: str) -> int | None:
        """When the key expires (ms since the epoch); None when it never does or is absent."""
        return self._ops.expires_at(key)

    def put(
        self,
        key: str,
        value: Any,
        if_version: int | None = None,
        ttl_seconds: float | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> int:
        """Write; return the new version. ``if_version=0``: only if absent. ``ttl_seconds``: expire then
        (without it, any expiry is cleared). Raises VersionConflict. ``idempotency_key`` (every write
        takes one): apply this write once; a repeat with the key returns the first answer, writing nothing."""
        op = ops.put(key, value, check_if_version(if_version), protocol.ttl_ms(ttl_seconds))
        return self._ops.write(op.keyed(idempotency_key))

    def delete(self, key: str, if_version: int | None = None, *, idempotency_key: str | None = None) -> None:
        self._ops.write(ops.delete(key, check_if_version(if_version)).keyed(idempotency_key))

    def append(
        self, key: str, items: list[Any], ttl_seconds: float | None = None, *, idempotency_key: str | None = None
    ) -> Appended:
        """Add ``items`` atomically at the end of the list, creating it if needed."""
        return self._ops.write(ops.append(key, items, protocol.ttl_ms(ttl_seconds)).keyed(idempotency_key))

    def update(self, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """Compare-and-set loop: read, apply ``fn`` (may run more than once), write if unchanged."""
        for attempt in range(UPDATE_TRIES):
            current = self._ops.get_versioned(key)
            new = fn(default if current.version == 0 else current.value)
            try:
                self._ops.write(ops.put(key, new, current.version, None))
                return new
            except VersionConflict:
                time.sleep(backoff_seconds(attempt))
        raise _conflict_after_tries(key)

    def keys(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """Every ``(key, version)`` starting with ``prefix``, in key order, fetched page by page."""
        values.check_key_prefix(prefix)
        after: str | None = ""
        while after is not None:
            page, after = self._ops.keys_page(prefix, after, protocol.DEFAULT_PAGE)
            yield from page

    def tail(self, key: str, n: int) -> list[Any]:
        """The last ``n`` items of a list (1–1000), oldest first; ``[]`` when absent. Raises NotAList."""
        return self._ops.tail(key, protocol.check_tail(n)).items

    def items(self, key: str, start: int = 0, limit: int = protocol.DEFAULT_PAGE) -> Items:
        """Items ``start`` … ``start + limit - 1`` of a list, with its version and length."""
        return self._ops.items(key, *protocol.check_range(start, limit))

    def trim(
        self,
        key: str,
        keep_last: int,
        if_version: int | None = None,
        ttl_seconds: float | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Appended:
        """Drop the oldest items so that at most ``keep_last`` remain (a write)."""
        return self._ops.write(_trim(key, keep_last, if_version, ttl_seconds).keyed(idempotency_key))

    def pop(self, key: str, if_version: int | None = None, *, idempotency_key: str | None = None) -> Any:
        """Remove and return the last item; None when the key is absent or the list empty."""
        return self._ops.write(ops.pop(key, check_if_version(if_version)).keyed(idempotency_key))

    def incr(
        self,
        key: str,
        by: int = 1,
        if_version: int | None = None,
        ttl_seconds: float | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> int:
        """Add ``by`` in the store (an absent key counts from 0); the new integer. Raises NotAnInteger,
        and InvalidValue when the result leaves signed 64-bit."""
        return self._ops.write(_incr(key, by, if_version, ttl_seconds).keyed(idempotency_key))

    def patch(
        self,
        key: str,
        patch: Any,
        if_version: int | None = None,
        ttl_seconds: float | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Any:
        """Apply a JSON Merge Patch (RFC 7396) in the store (an absent key is ``{}``); the new value."""
        op = ops.patch(key, patch, check_if_version(if_version), protocol.ttl_ms(ttl_seconds))
        return self._ops.write(op.keyed(idempotency_key))

    def batch(self) -> Batch:
        """``with scope.batch() as b:`` queue writes here (and on ``b.on(other)``); applied together."""
        from .batch import Batch

        return Batch(self._ops)


class AsyncScope:
    """``Scope`` for async code: the same calls, awaited."""

    def __init__(self, ops: AsyncScopeOps) -> None:
        self._ops = ops

    async def get(self, key: str, default: Any = None) -> Any:
        found = await self._ops.get_versioned(key)
        return default if found.version == 0 else found.value

    async def get_versioned(self, key: str) -> Versioned:
        return await self._ops.get_versioned(key)

    async def expires_at(self, key: str) -> int | None:
        return await self._ops.expires_at(key)

    async def put(
        self,
        key: str,
        value: Any,
        if_version: int | None = None,
        ttl_seconds: float | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> int:
        op = ops.put(key, value, check_if_version(if_version), protocol.ttl_ms(ttl_seconds))
        return await self._ops.write(op.keyed(idempotency_key))

    async def delete(self, key: str, if_version: int | None = None, *, idempotency_key: str | None = None) -> None:
        await self._ops.write(ops.delete(key, check_if_version(if_version)).keyed(idempotency_key))

    async def append(
        self, key: str, items: list[Any], ttl_seconds: float | None = None, *, idempotency_key: str | None = None
    ) -> Appended:
        return await self._ops.write(ops.append(key, items, protocol.ttl_ms(ttl_seconds)).keyed(idempotency_key))

    async def update(self, key: str, fn: Callable[[Any], Any | Awaitable[Any]], default: Any = None) -> Any:
        for attempt in range(UPDATE_TRIES):
            current = await self._ops.get_versioned(key)
            new = fn(default if current.version == 0 else current.value)
            if isinstance(new, Awaitable):
                new = await new
            try:
                await self._ops.write(ops.put(key, new, current.version, None))
                return new
            except VersionConflict:
                await asyncio.sleep(backoff_seconds(attempt))
        raise _conflict_after_tries(key)

    async def keys(self, prefix: str = "") -> AsyncIterator[tuple[str, int]]:
        values.check_key_prefix(prefix)
        after: str | None = ""
        while after is not None:
            page, after = await self._ops.keys_page(prefix, after, protocol.DEFAULT_PAGE)
            for item in page:
                yield item

    async def tail(self, key: str, n: int) -> list[Any]:
        return (await self._ops.tail(key, protocol.check_tail(n))).items

    async def items(self, key: str, start: int = 0, limit: int = protocol.DEFAULT_PAGE) -> Items:
        return await self._ops.items(key, *protocol.check_range(start, limit))

    async def trim(
        self,
        key: str,
        keep_last: int,
        if_version: int | None = None,
        ttl_seconds: float | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Appended:
        return await self._ops.write(_trim(key, keep_last, if_version, ttl_seconds).keyed(idempotency_key))

    async def pop(self, key: str, if_version: int | None = None, *, idempotency_key: str | None = None) -> Any:
        return await self._ops.write(ops.pop(key, check_if_version(if_version)).keyed(idempotency_key))

    async def incr(
        self,
        key: str,
        by: int = 1,
        if_version: int | None = None,
        ttl_seconds: float | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> int:
        return await self._ops.write(_incr(key, by, if_version, ttl_seconds).keyed(idempotency_key))

    async def patch(
        self,
        key: str,
        patch: Any,
        if_version: int | None = None,
        ttl_seconds: float | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Any:
        op = ops.patch(key, patch, check_if_version(if_version), protocol.ttl_ms(ttl_seconds))
        return await self._ops.write(op.keyed(idempotency_key))

    def batch(self) -> AsyncBatch:
        """``async with scope.batch() as b:`` queue writes here (and on ``b.on(other)``); applied together."""
        from .batch import AsyncBatch

        return AsyncBatch(self._ops)


def _trim(key: str, keep_last: int, if_version: int | None, ttl_seconds: float | None) -> Op[Appended]:
    return ops.trim(
        key, protocol.check_keep_last(keep_last), check_if_version(if_version), protocol.ttl_ms(ttl_seconds)
    )


def _incr(key: str, by: int, if_version: int | None, ttl_seconds: float | None) -> Op[int]:
    return ops.incr(key, protocol.check_by(by), check_if_version(if_version), protocol.ttl_ms(ttl_seconds))


def scope_namespace(kind: str, agent: str, id: str | None, env: str = "default") -> str:
    """Check a scope's coordinates and return its namespace. The agent scope takes no id."""
    if kind not in SCOPE_KINDS:
        raise InvalidRequest(f"unknown scope {kind!r}: use one of {', '.join(SCOPE_KINDS)}")
    values.check_key(env, "env")
    values.check_key(agent, "agent")
    if kind == "agent":
        if id is not None:
            raise InvalidRequest("the agent scope takes no id")
        return namespace(env, kind, agent)
    return namespace(env, kind, agent, values.check_key(id, f"{kind} id"))


def check_namespace(ns: object) -> str:
    """A stored namespace that a write could have made — a scope's (``scope_namespace``) or the
    console's sign-ins (``CONSOLE_SESSIONS``) — for an import; InvalidRequest naming it otherwise."""
    if ns == CONSOLE_SESSIONS:
        return ns
    parts = ns.split("/") if isinstance(ns, str) else []
    if len(parts) == 4 and parts[1] in SCOPE_KINDS:
        env, kind, agent, id = parts
        with contextlib.suppress(KeepstateError):
            if scope_namespace(kind, agent, id if kind != "agent" or id else None, env) == ns:
                return ns
    raise InvalidRequest(
        f"namespace {ns!r:.120} is no scope's: expected ENV/run|session|user/AGENT/ID or ENV/agent/AGENT/"
    )


def check_version(version: object, what: str = "version", least: int = 1) -> int:
    """A version (or an ``if_version``) from ``least`` to ``values.MAX_VERSION``; InvalidRequest otherwise."""
    if isinstance(version, int) and not isinstance(version, bool) and least <= version <= values.MAX_VERSION:
        return version
    raise InvalidRequest(f"{what} must be an integer from {least} to {values.MAX_VERSION}, got {version!r:.40}")


def check_if_version(if_version: object) -> int | None:
    return None if if_version is None else check_version(if_version, "if_version", least=0)
