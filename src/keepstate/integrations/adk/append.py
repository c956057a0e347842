"""Writing one ADK event: its check and its write are one atomic step.

An event is one keepstate batch: the event appended to the session's events list, the record's
update time patched, and each part of the state delta merged into the object holding it (the
record's ``state``, the user scope's ``user_state``, the agent scope's ``app_state``). Each object
the delta writes is read first and checked (``seen.changed``), and the batch writes it only
``if_version`` it is still at the version read: the check holds at the moment of the write, on
every backend. When another writer got in between (a version conflict, nothing written), the
objects are read and checked again: if it wrote a key of this delta, the append is refused with
ADK's ``StaleSessionError``; if only other keys, the delta goes on top of what it wrote. Objects the
delta does not write are not guarded, so events without state deltas never conflict.
"""

from __future__ import annotations

import asyncio
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError

from ...errors import TooLarge, VersionConflict
from ...scope import AsyncScope, Versioned
from . import layout, seen
from .place import Place, record_of


class EventWrite:
    """One event's item and state delta, to be written into ``place`` through a session object that
    has seen ``what`` (None: a session object this service did not hand out, loaded at ``loaded_at``)."""

    def __init__(
        self,
        place: Place,
        item: dict[str, Any],
        timestamp: float,
        delta: layout.Parts,
        what: seen.Seen | None,
        loaded_at: float,
    ) -> None:
        self.place, self.item, self.timestamp, self.delta = place, item, timestamp, delta
        self.what, self.loaded_at = what, loaded_at
        self.tag = layout.new_tag()

    async def run(self) -> seen.Seen:
        """Write (raises StaleSessionError, SessionNotFoundError, TooLarge); what the session object
        has seen afterwards."""
        chunk, fresh, full = -1, False, None
        while True:
            record, found = await self._read()
            last = layout.last_chunk(record)
            if full is not None and fresh and last < chunk:
                raise full  # the list was new and stays so: the event alone is over 1 MiB
            chunk = max(chunk + 1, last) if full is not None else max(chunk, last)
            fresh = chunk > last
            what = self._check(record, found)
            try:
                await self._write(chunk, fresh, found)
                return seen.after_write(what, self.delta, self.tag)
            except TooLarge as error:
                full = error  # full, or another writer made and filled it: the next list
            except VersionConflict:
                full = None  # another writer got in between: check again

    def _guarded(self) -> dict[str, tuple[AsyncScope, str]]:
        """The shared objects to read besides the record: those the delta writes (all when nothing was seen)."""
        place = self.place
        where = {"app": (place.app, layout.APP_STATE), "user": (place.user, layout.USER_STATE)}
        return {part: at for part, at in where.items() if self.what is None or getattr(self.delta, part)}

    async def _read(self) -> tuple[dict[str, Any], dict[str, Versioned]]:
        """(the session's record, each guarded object as stored now)."""
        guarded = self._guarded()
        reads = [scope.get_versioned(key) for scope, key in guarded.values()]
        record, *found = await asyncio.gather(self.place.session.get_versioned(self.place.record), *reads)
        value = record_of(record.value)
        if value is None:
            raise SessionNotFoundError(f"Session {self.place.session_id} not found.")
        return value, {"record": record, **dict(zip(guarded, found, strict=True))}

    def _check(self, record: dict[str, Any], found: dict[str, Versioned]) -> seen.Seen:
        """What the session object saw; raises StaleSessionError when a key the delta writes changed since."""
        stored: dict[str, Any] = {part: found[part].value for part in ("app", "user") if part in found}
        stored["session"] = record.get("state")
        what = self.what
        if what is None:  # ADK's own rule for such objects: stale once the session was written after it
            if record.get("updated", 0.0) > self.loaded_at and any(self.delta):
                raise _stale(self.place, seen.names(self.delta))
            what = self.what = seen.seen(stored.get("app"), stored.get("user"), stored["session"])
        keys = seen.changed(what, self.delta, stored)
        if keys:
            raise _stale(self.place, keys)
        return what

    async def _write(self, chunk: int, fresh: bool, found: dict[str, Versioned]) -> None:
        """One batch: the event into events list ``chunk`` (``fresh``: one the record gains), the record,
        each part of the delta if its object is still at the version read."""
        place, delta = self.place, self.delta
        record_patch: dict[str, Any] = {"updated": self.timestamp}
        if delta.session:
            record_patch["state"] = layout.wrapped(delta.session, self.tag)
        if fresh:
            record_patch["chunks"] = {str(chunk): True}
        async with place.session.batch() as batch:
            batch.append(place.events(chunk), [self.item])
            batch.patch(place.record, record_patch, if_version=found["record"].version if delta.session else None)
            for part, scope, key in (("app", place.app, layout.APP_STATE), ("user", place.user, layout.USER_STATE)):
                if getattr(delta, part):
                    patch = layout.wrapped(getattr(delta, part), self.tag)
                    batch.on(scope).patch(key, patch, if_version=found[part].version)


def _stale(place: Place, keys: list[str]) -> StaleSessionError:
    return StaleSessionError(
        f"Session {place.session_id} is stale: {', '.join(sorted(keys))} changed since this session object "
        "was loaded. Reload it (get_session) and append the event again."
    )
