"""``KeepstateSessionService``: ADK's ``BaseSessionService`` on a keepstate store (see ``layout``).

What it holds that ADK's own services do not:

- **Nothing lost between processes.** An append is one atomic batch: the event appended to the
  session's list, the session's record (its update time, its state delta) and the ``user:`` and
  ``app:`` deltas applied as merge patches in the store. No read-modify-write runs in the process,
  so two processes writing the same user's or app's state, through any sessions, lose no update,
  and disjoint keys never conflict.
- **A stale session object is applied on top of storage**, not refused: its event is added after
  the ones other writers added, its deltas merged into what storage holds (``refuses_stale`` is
  False). ADK's database services refuse it with ``StaleSessionError``, and the event is lost
  unless the caller reloads and retries.
- **Cost flat in history.** ``GetSessionConfig`` reads only the tail of the events; an append
  reads one small record; a whole read decodes only the events added since the last one
  (``events.EventReader``).

Events are kept in append order (the order writers' appends reached the store), which is also the
order ``GetSessionConfig.after_timestamp`` is applied in: reading from the newest, it stops at the
first event older than the bound.

One race is left: an append racing a ``delete_session`` of the same session may land after the
delete; what it writes is not seen (the session reads as absent) and is replaced when the id is
created again.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session

from ... import embedded
from ...errors import TooLarge, VersionConflict
from ...scope import AsyncScope
from . import layout
from .events import EventReader


class _Place:
    """The scopes and keys of one ADK session (see ``layout``)."""

    def __init__(self, store: embedded.Store, app_name: str, user_id: str, session_id: str) -> None:
        self.app_name, self.user_id, self.session_id = app_name, user_id, session_id
        self.app = _app_scope(store, app_name)
        self.user = _user_scope(store, app_name, user_id)
        self.session = store.ascope("session", agent=layout.name(app_name), id=layout.name(session_id))
        self.index = layout.session_entry(session_id)
        self.record = layout.record_key(user_id)

    def events(self, chunk: int) -> str:
        return layout.events_key(self.user_id, chunk)

    def cache_key(self, chunk: int) -> tuple[str, str, str, int]:
        return self.app_name, self.user_id, self.session_id, chunk

    async def load(self) -> dict[str, Any] | None:
        """The session's record, or None when the session does not exist."""
        record = await self.session.get(self.record)
        return record if isinstance(record, dict) and "id" in record else None


def _app_scope(store: embedded.Store, app_name: str) -> AsyncScope:
    return store.ascope("agent", agent=layout.name(app_name))


def _user_scope(store: embedded.Store, app_name: str, user_id: str) -> AsyncScope:
    return store.ascope("user", agent=layout.name(app_name), id=layout.name(user_id))


class KeepstateSessionService(BaseSessionService):
    """ADK sessions, their events and their app/user/session state in a keepstate store.

    ``KeepstateSessionService(url)`` opens the store (any keepstate URL) and closes it in
    ``close()``; ``from_store(store)`` shares an open one and leaves it open. ``close()`` and
    ``aclose()`` are the same coroutine (ADK services close with ``await service.close()``).
    Each new session is registered with the store (``aregister_session``), so ``keepstate serve``'s
    console lists it under its id, with the app as agent and the user as end user.
    """

    def __init__(self, url: str, *, _store: embedded.Store | None = None) -> None:
        self._owned = _store is None
        self.store = embedded.open(url) if _store is None else _store
        self._reader = EventReader()

    @classmethod
    def from_store(cls, store: embedded.Store) -> KeepstateSessionService:
        """A service on an open store, which ``close()`` leaves open."""
        return cls(store.url, _store=store)

    async def close(self) -> None:
        """Close the store if this service opened it (its connections of this loop first)."""
        if self._owned:
            await self.store.aclose()
            self.store.close()

    async def aclose(self) -> None:
        await self.close()

    def _place(self, app_name: str, user_id: str, session_id: str) -> _Place:
        return _Place(self.store, app_name, user_id, session_id)

    async def create_session(self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> Session:
        session_id = (session_id or "").strip() or str(uuid.uuid4())
        place = self._place(app_name, user_id, session_id)
        app, user, own = layout.split_delta(_json_safe(state or {}))
        now = time.time()
        await self.store.aregister_session(layout.name(session_id), layout.name(app_name), user=layout.name(user_id),
                                           metadata={"adk_app": app_name, "adk_user": user_id})
        record = {"id": session_id, "user_id": user_id, "app_name": app_name, "created": now, "updated": now,
                  "chunks": {}, "state": layout.wrapped(own)}
        await self._write_new(place, record, app, user)
        shared = await self._shared_state(place)
        return Session(id=session_id, app_name=app_name, user_id=user_id, last_update_time=now,
                       state=layout.merged_state(*shared, own))

    @staticmethod
    async def _write_new(place: _Place, record: dict[str, Any], app: dict[str, Any], user: dict[str, Any]) -> None:
        """One batch writing a new session, its index entry only if absent. An entry whose session is
        gone (its session-scope state dropped by a delete from the console) is taken over."""
        expected = 0
        while True:
            try:
                async with place.user.batch() as batch:
                    batch.put(place.index, {"id": place.session_id}, if_version=expected)
                    batch.on(place.app).put(layout.user_entry(place.user_id), {"id": place.user_id})
                    batch.on(place.session).delete(place.events(0))
                    batch.on(place.session).put(place.record, record)
                    _patch_shared(batch, place, app, user)
                return
            except VersionConflict as conflict:
                if expected or await place.load() is not None:
                    raise AlreadyExistsError(f"Session with id {place.session_id} already exists.") from None
                expected = conflict.current_version

    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> Session | None:
        place = self._place(app_name, user_id, session_id)
        record, (app, user) = await asyncio.gather(place.load(), self._shared_state(place))
        if record is None:
            return None
        events = await self._events(place, layout.last_chunk(record), config or GetSessionConfig())
        return Session(id=session_id, app_name=app_name, user_id=user_id, events=events,
                       last_update_time=record["updated"],
                       state=layout.merged_state(app, user, layout.unwrapped(record.get("state"))))

    async def _shared_state(self, place: _Place) -> tuple[dict[str, Any], dict[str, Any]]:
        """(app state, user state) as stored now (read at once)."""
        app, user = await asyncio.gather(place.app.get(layout.APP_STATE), place.user.get(layout.USER_STATE))
        return layout.unwrapped(app), layout.unwrapped(user)

    async def _events(self, place: _Place, last_chunk: int, config: GetSessionConfig) -> list[Event]:
        recent, after = config.num_recent_events, config.after_timestamp
        if recent == 0:
            return []
        if recent is None and after is None:
            chunks = [await self._reader.whole(place.session, place.events(c), place.cache_key(c))
                      for c in range(last_chunk + 1)]
            return [event for chunk in chunks for event in chunk]
        newest_first: list[Event] = []
        for chunk in range(last_chunk, -1, -1):
            left = None if recent is None else recent - len(newest_first)
            found, stopped = await self._reader.tail(place.session, place.events(chunk), left, after)
            newest_first += found
            if stopped:
                break
        return newest_first[::-1]

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """Every session of the user (of every user when None), oldest update first, without events."""
        app_scope = _app_scope(self.store, app_name)
        users = [user_id] if user_id is not None else [
            entry["id"] async for key, _ in app_scope.keys("user.") if (entry := await app_scope.get(key))]
        app_state = layout.unwrapped(await app_scope.get(layout.APP_STATE))
        sessions = []
        for user in users:
            sessions += await self._sessions_of(app_name, user, app_state)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def _sessions_of(self, app_name: str, user_id: str, app_state: dict[str, Any]) -> list[Session]:
        user_scope = _user_scope(self.store, app_name, user_id)
        user_state = layout.unwrapped(await user_scope.get(layout.USER_STATE))
        found = []
        async for key, _ in user_scope.keys("session."):
            entry = await user_scope.get(key)
            record = None if entry is None else await self._place(app_name, user_id, entry["id"]).load()
            if record is not None:
                found.append(Session(id=record["id"], app_name=app_name, user_id=user_id,
                                     last_update_time=record["updated"],
                                     state=layout.merged_state(app_state, user_state,
                                                               layout.unwrapped(record.get("state")))))
        return found

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        place = self._place(app_name, user_id, session_id)
        record = await place.load()
        async with place.user.batch() as batch:
            batch.delete(place.index)
            batch.on(place.session).delete(place.record)
            for chunk in range(layout.last_chunk(record or {}) + 1):
                batch.on(place.session).delete(place.events(chunk))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return layout.unwrapped(await _user_scope(self.store, app_name, user_id).get(layout.USER_STATE))

    async def append_event(self, session: Session, event: Event) -> Event:
        """Add the event and apply its state delta in one atomic write, on top of what storage holds
        (a stale ``session`` is not refused); the session object gets the event and the delta."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        place = self._place(session.app_name, session.user_id, session.id)
        record = await place.load()
        if record is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        app, user, own = layout.split_delta(_json_safe(event.actions.state_delta if event.actions else {}))
        item = layout.event_item(event.model_dump_json(exclude_none=True), event.author, _text(event))
        chunk = layout.last_chunk(record)
        while True:
            fresh = chunk > layout.last_chunk(record)
            try:
                await self._write_event(place, chunk, fresh, item, event.timestamp, app, user, own)
                break
            except TooLarge:
                record = await place.load() or record
                if fresh and layout.last_chunk(record) < chunk:
                    raise  # the list was new and stays so: the event alone is over 1 MiB
                chunk = max(chunk + 1, layout.last_chunk(record))  # full, or another writer made and filled it
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    @staticmethod
    async def _write_event(place: _Place, chunk: int, fresh: bool, item: dict[str, Any], timestamp: float,
                           app: dict[str, Any], user: dict[str, Any], own: dict[str, Any]) -> None:
        """One batch: the event into events list ``chunk`` (``fresh``: a chunk the record gains), the
        record, the shared state."""
        record_patch: dict[str, Any] = {"updated": timestamp, "state": layout.wrapped(own)}
        if fresh:
            record_patch["chunks"] = {str(chunk): True}
        async with place.session.batch() as batch:
            batch.append(place.events(chunk), [item])
            batch.patch(place.record, record_patch)
            _patch_shared(batch, place, app, user)


def _patch_shared(batch: Any, place: _Place, app: dict[str, Any], user: dict[str, Any]) -> None:
    if app:
        batch.on(place.app).patch(layout.APP_STATE, layout.wrapped(app))
    if user:
        batch.on(place.user).patch(layout.USER_STATE, layout.wrapped(user))


def _json_safe(state: dict[str, Any]) -> dict[str, Any]:
    """The state as JSON data, as ADK's own services store it (its own helper, same warnings)."""
    return _session_util.make_json_safe_state(state)


def _text(event: Event) -> str | None:
    """The event's text parts, joined: what the console shows of it."""
    if event.content is None or not event.content.parts:
        return None
    texts = [part.text for part in event.content.parts if part.text]
    return "\n".join(texts) if texts else None
