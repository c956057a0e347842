"""Decoded items by (keepstate key, version), so a search reads only the items that changed.

A search lists the keys under its prefix with their versions (one range scan, 100 keys a page) and
needs each item's value to filter it. A keepstate version never repeats for a key, also after a
delete or an expiry, so a value read once at a version is that version's value for good, in every
process: the cache is never stale, only incomplete. Expired and deleted items are not listed, so
the cache never brings them back. Entries are shared with the filters only; what a caller gets is
a copy (``copied``), so changing a returned item cannot change the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import orjson

MAX_ENTRIES = 10_000


class VersionCache:
    """The most recently used ``MAX_ENTRIES`` items, each under its key and the version it was read at."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: OrderedDict[str, tuple[int, Any]] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def get(self, key: str, version: int) -> Any:
        """The value read at ``version``, or None when this version was not read here."""
        with self._lock:
            found = self._entries.get(key)
            if found is None or found[0] != version:
                return None
            self._entries.move_to_end(key)
            return found[1]

    def put(self, key: str, version: int, value: Any) -> None:
        with self._lock:
            self._entries[key] = (version, value)
            self._entries.move_to_end(key)
            if len(self._entries) > self._max:
                self._entries.popitem(last=False)


def copied(value: Any) -> Any:
    """A deep copy of a JSON value (a round trip through orjson: faster than ``copy.deepcopy``)."""
    return orjson.loads(orjson.dumps(value))
