"""State scopes: the seven calls an agent makes, on any store, embedded or over HTTP.

A ``Scope`` holds the rules that do not depend on where state lives (the compare-and-set loop of
``update``, paging of ``keys``, defaults); a small ``ScopeOps`` object does the five primitive
calls, either straight on a store (``StoreOps``, here) or over HTTP (``keepstate.client``).
``AsyncScope`` is the same over awaitable ops, for async agents.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, NamedTuple, Protocol

from . import values
from .errors import InvalidRequest, VersionConflict
from .stores.base import SyncStateFacet
from .stores.records import SCOPE_KINDS, namespace

UPDATE_TRIES = 64
_MISSING: Any = object()


class Versioned(NamedTuple):
    """A value and its version; ``(None, 0)`` for an absent key."""

    value: Any
    version: int


class Appended(NamedTuple):
    """What an append returns: the list's new version and length."""

    version: int
    length: int


Page = tuple[list[tuple[str, int]], str | None]


class ScopeOps(Protocol):
    def get_versioned(self, key: str) -> Versioned: ...
    def put(self, key: str, value: Any, if_version: int | None) -> int: ...
    def delete(self, key: str, if_version: int | None) -> None: ...
    def append(self, key: str, items: list[Any]) -> Appended: ...
    def keys_page(self, prefix: str, after: str, limit: int) -> Page: ...


class AsyncScopeOps(Protocol):
    async def get_versioned(self, key: str) -> Versioned: ...
    async def put(self, key: str, value: Any, if_version: int | None) -> int: ...
    async def delete(self, key: str, if_version: int | None) -> None: ...
    async def append(self, key: str, items: list[Any]) -> Appended: ...
    async def keys_page(self, prefix: str, after: str, limit: int) -> Page: ...


def backoff_seconds(attempt: int) -> float:
    """Jittered exponential backoff for compare-and-set retries, capped at 50 ms."""
    return random.uniform(0, min(0.05, 0.0005 * 2**attempt))


def _conflict_after_tries(key: str) -> VersionConflict:
    return VersionConflict(f"update of {key!r} kept conflicting after {UPDATE_TRIES} tries")


class Scope:
    """One scope's state: ``get``, ``get_versioned``, ``put``, ``delete``, ``append``, ``update``, ``keys``."""

    def __init__(self, ops: ScopeOps) -> None:
        self._ops = ops

    def get(self, key: str, default: Any = None) -> Any:
        """The value, or ``default`` when the key is absent."""
        found = self._ops.get_versioned(key)
        return default if found.version == 0 else found.value

    def get_versioned(self, key: str) -> Versioned:
        return self._ops.get_versioned(key)

    def put(self, key: str, value: Any, if_version: int | None = None) -> int:
        """Write; return the new version. ``if_version=0``: only if absent. Raises VersionConflict."""
        return self._ops.put(key, value, if_version)

    def delete(self, key: str, if_version: int | None = None) -> None:
        self._ops.delete(key, if_version)

    def append(self, key: str, items: list[Any]) -> Appended:
        """Add ``items`` atomically at the end of the list, creating it if needed."""
        return self._ops.append(key, items)

    def update(self, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """Compare-and-set loop: read, apply ``fn`` (may run more than once), write if unchanged."""
        for attempt in range(UPDATE_TRIES):
            current = self._ops.get_versioned(key)
            new = fn(default if current.version == 0 else current.value)
            try:
                self._ops.put(key, new, current.version)
                return new
            except VersionConflict:
                time.sleep(backoff_seconds(attempt))
        raise _conflict_after_tries(key)

    def keys(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """Every ``(key, version)`` starting with ``prefix``, in key order, fetched page by page."""
        after: str | None = ""
        while after is not None:
            page, after = self._ops.keys_page(prefix, after, 100)
            yield from page


class AsyncScope:
    """``Scope`` for async code: the same calls, awaited."""

    def __init__(self, ops: AsyncScopeOps) -> None:
        self._ops = ops

    async def get(self, key: str, default: Any = None) -> Any:
        found = await self._ops.get_versioned(key)
        return default if found.version == 0 else found.value

    async def get_versioned(self, key: str) -> Versioned:
        return await self._ops.get_versioned(key)

    async def put(self, key: str, value: Any, if_version: int | None = None) -> int:
        return await self._ops.put(key, value, if_version)

    async def delete(self, key: str, if_version: int | None = None) -> None:
        await self._ops.delete(key, if_version)

    async def append(self, key: str, items: list[Any]) -> Appended:
        return await self._ops.append(key, items)

    async def update(self, key: str, fn: Callable[[Any], Any | Awaitable[Any]], default: Any = None) -> Any:
        for attempt in range(UPDATE_TRIES):
            current = await self._ops.get_versioned(key)
            new = fn(default if current.version == 0 else current.value)
            if isinstance(new, Awaitable):
                new = await new
            try:
                await self._ops.put(key, new, current.version)
                return new
            except VersionConflict:
                await asyncio.sleep(backoff_seconds(attempt))
        raise _conflict_after_tries(key)

    async def keys(self, prefix: str = "") -> AsyncIterator[tuple[str, int]]:
        after: str | None = ""
        while after is not None:
            page, after = await self._ops.keys_page(prefix, after, 100)
            for item in page:
                yield item


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


def check_if_version(if_version: object) -> int | None:
    if if_version is None:
        return None
    if not isinstance(if_version, int) or isinstance(if_version, bool) or if_version < 0:
        raise InvalidRequest("if_version must be a non-negative integer")
    return if_version


class StoreOps:
    """``ScopeOps`` straight on a store's sync state facet: validation, encoding, decoding."""

    def __init__(self, backend: SyncStateFacet, ns: str) -> None:
        self.backend = backend
        self.ns = ns

    def get_versioned(self, key: str) -> Versioned:
        entry = self.backend.get(self.ns, values.check_key(key))
        return Versioned(None, 0) if entry is None else Versioned(values.decode(entry.data), entry.version)

    def put(self, key: str, value: Any, if_version: int | None) -> int:
        values.check_key(key)
        data = values.encode(value)
        values.check_size(len(data))
        return self.backend.put(self.ns, key, data, check_if_version(if_version))

    def delete(self, key: str, if_version: int | None) -> None:
        self.backend.delete(self.ns, values.check_key(key), check_if_version(if_version))

    def append(self, key: str, items: list[Any]) -> Appended:
        values.check_key(key)
        encoded = values.encode_items(items)
        return Appended(*self.backend.append(self.ns, key, encoded))

    def keys_page(self, prefix: str, after: str, limit: int) -> Page:
        page = self.backend.keys(self.ns, prefix, after, limit)
        return page, (page[-1][0] if len(page) == limit else None)
