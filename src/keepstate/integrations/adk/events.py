"""Reading an ADK session's events from its lists: only the tail when a config limits it, and a
whole read that decodes only what was appended since the last one.

``EventReader`` keeps, per events list, the events it decoded with the list's version. Lists of
events only ever grow by one-item appends (the service never trims or rewrites them), so a list
whose version moved by as much as its length did still starts with the cached events: a whole
read then fetches and decodes the new items only, and the thousandth turn of a Runner (which
reads the whole session each turn) costs what the first did. Any other change (the session
deleted, created again) is seen from the numbers and the list is read again from its start.
The events of a returned session are shared with this cache: like ADK's own code, treat them as
read-only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from google.adk.events.event import Event

from ...protocol import MAX_LIST_READ
from ...scope import AsyncScope
from . import layout

CACHED_LISTS = 256
"""Events lists whose decoded events are kept, least recently read dropped first."""
_READ_TRIES = 8


def decode(item: Any) -> Event:
    return Event.model_validate_json(layout.event_json(item))


class EventReader:
    """Reads events lists; one per service (its cache is per process)."""

    def __init__(self) -> None:
        self._cache: OrderedDict[Hashable, tuple[int, list[Event]]] = OrderedDict()

    async def whole(self, scope: AsyncScope, key: str, cache_key: Hashable) -> list[Event]:
        """Every event of the list, in order."""
        for _ in range(_READ_TRIES):
            found = await self._extend(scope, key, self._cache.pop(cache_key, None))
            if found is not None:
                self._cache[cache_key] = found
                while len(self._cache) > CACHED_LISTS:
                    self._cache.popitem(last=False)
                return list(found[1])
        raise RuntimeError(f"the events list {key!r} kept changing other than by appends while read")

    @staticmethod
    async def _extend(
        scope: AsyncScope, key: str, base: tuple[int, list[Event]] | None
    ) -> tuple[int, list[Event]] | None:
        """``base`` (version, events) completed to the list's end; None when the list was not only
        appended to since ``base`` (read again from the start)."""
        version, events = (None, []) if base is None else (base[0], list(base[1]))
        length = len(events)
        while True:
            page = await scope.items(key, len(events), MAX_LIST_READ)
            if version is not None and not 0 <= page.version - version == page.length - length:
                return None  # not only appended to: deleted (an absent list reads as version 0), recreated...
            events += [decode(item) for item in page.items]
            version, length = page.version, page.length
            if len(events) >= length:
                return version, events

    @staticmethod
    async def tail(scope: AsyncScope, key: str, recent: int | None, after: float | None) -> tuple[list[Event], bool]:
        """The newest events of one list, newest first: at most ``recent``, none older than ``after``.
        Also whether the reading stopped (on count or on timestamp) rather than reached the start."""
        if after is None and recent is not None and recent <= MAX_LIST_READ:  # one read
            items = await scope.tail(key, recent)
            return [decode(item) for item in reversed(items)], len(items) == recent
        end = (await scope.items(key, 2**62, 1)).length
        newest_first: list[Event] = []
        while end > 0:
            want = MAX_LIST_READ if recent is None else min(MAX_LIST_READ, recent - len(newest_first))
            start = max(0, end - want)
            page = await scope.items(key, start, end - start)
            for item in reversed(page.items):
                if after is not None and item["event"].get("timestamp", 0.0) < after:
                    return newest_first, True
                newest_first.append(decode(item))
            if recent is not None and len(newest_first) >= recent:
                return newest_first, True
            end = start
        return newest_first, False
