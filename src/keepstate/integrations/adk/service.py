"""``KeepstateSessionService``: ADK's ``BaseSessionService`` on a keepstate store (see ``layout``).

What it holds that ADK's own services do not:

- **No message and no update lost between processes.** An append is one atomic batch: the event
  appended to the session's list, the session's record (its update time, its state delta) and the
  ``user:`` and ``app:`` deltas merged into their objects in the store, each object written only if
  it is still the version that was checked (``append``). An append through a session object is
  refused with ADK's ``StaleSessionError``, nothing written, exactly when a key its delta writes was
  written by someone else since that object was loaded (``seen``): an update computed from the old
  value would overwrite one it never saw. Otherwise it goes on top of what storage holds: its event
  after the ones others added, its keys merged with theirs. So an event without a state delta is
  never refused, and two writers of disjoint keys never conflict.
- **Cost flat in history.** ``GetSessionConfig`` reads only the tail of the events; an append
  reads the small record and the state objects its delta writes; a whole read decodes only the
  events added since the last one (``events.EventReader``).

Events are kept in append order (the order writers' appends reached the store), which is also the
order ``GetSessionConfig.after_timestamp`` is applied in: reading from the newest, it stops at the
first event older than the bound.

One race is left: an append racing a ``delete_session`` of the same session may land after the
delete; what it writes is not seen (the session reads as absent) and is replaced when the id is
created again.

Every write above is one batch across scopes (session, user, app), so a store that keeps a batch in
one scope (a Redis Cluster: ``cross_scope_batches`` not declared) is refused when the service is made,
before anything is opened: splitting the batch per scope would let a crash leave an event without its
``user:``/``app:`` delta, or the delta without its event.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session

from ... import embedded
from ...errors import InvalidRequest, StoreClosed, VersionConflict
from ...stores import capabilities_of
from . import layout, seen
from .append import EventWrite
from .events import EventReader
from .place import Place, app_scope, user_scope


class KeepstateSessionService(BaseSessionService):
    """ADK sessions, their events and their app/user/session state in a keepstate store.

    ``KeepstateSessionService(url)`` opens the store (any keepstate URL) and closes it in
    ``close()``; ``from_store(store)`` shares an open one and leaves it open. ``close()`` and
    ``aclose()`` are the same coroutine (ADK services close with ``await service.close()``).
    Each new session is registered with the store (``aregister_session``), so ``keepstate serve``'s
    console lists it under its id, with the app as agent and the user as end user.
    """

    def __init__(self, url: str, *, _store: embedded.Store | None = None) -> None:
        _check_batches(url)
        self._owned = _store is None
        self._store = embedded.open(url) if _store is None else _store
        self._closed = False
        self._reader = EventReader()

    @classmethod
    def from_store(cls, store: embedded.Store) -> KeepstateSessionService:
        """A service on an open store, which ``close()`` leaves open."""
        return cls(store.url, _store=store)

    @property
    def store(self) -> embedded.Store:
        """The keepstate store; ``StoreClosed`` once the service is closed."""
        if self._closed:
            raise StoreClosed("this KeepstateSessionService is closed: make a new one to use it")
        return self._store

    async def close(self) -> None:
        """Close the store if this service opened it (its connections of this loop first); again is a no-op."""
        if self._closed:
            return
        self._closed = True
        if self._owned:
            await self._store.aclose()
            self._store.close()

    async def aclose(self) -> None:
        await self.close()

    def _place(self, app_name: str, user_id: str, session_id: str) -> Place:
        return Place(self.store, app_name, user_id, session_id)

    async def create_session(
        self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None, session_id: str | None = None
    ) -> Session:
        session_id = (session_id or "").strip() or str(uuid.uuid4())
        place = self._place(app_name, user_id, session_id)
        initial, tag = layout.split_delta(_json_safe(state or {})), layout.new_tag()
        now = time.time()
        await self.store.aregister_session(
            layout.name(session_id),
            layout.name(app_name),
            user=layout.name(user_id),
            metadata={"adk_app": app_name, "adk_user": user_id},
        )
        record = {
            "id": session_id,
            "user_id": user_id,
            "app_name": app_name,
            "created": now,
            "updated": now,
            "chunks": {},
            "state": layout.wrapped(initial.session, tag),
        }
        await self._write_new(place, record, initial, tag)
        return _session(place, record, *await self._shared(place))

    @staticmethod
    async def _write_new(place: Place, record: dict[str, Any], initial: layout.Parts, tag: str) -> None:
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
                    if initial.app:
                        batch.on(place.app).patch(layout.APP_STATE, layout.wrapped(initial.app, tag))
                    if initial.user:
                        batch.on(place.user).patch(layout.USER_STATE, layout.wrapped(initial.user, tag))
                return
            except VersionConflict as conflict:
                if expected or await place.load() is not None:
                    raise AlreadyExistsError(f"Session with id {place.session_id} already exists.") from None
                expected = conflict.current_version

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None = None
    ) -> Session | None:
        place = self._place(app_name, user_id, session_id)
        record, (app, user) = await asyncio.gather(place.load(), self._shared(place))
        if record is None:
            return None
        events = await self._events(place, layout.last_chunk(record), config or GetSessionConfig())
        return _session(place, record, app, user, events)

    @staticmethod
    async def _shared(place: Place) -> tuple[Any, Any]:
        """The stored (wrapped) app and user state objects, read at once."""
        app, user = await asyncio.gather(place.app.get(layout.APP_STATE), place.user.get(layout.USER_STATE))
        return app, user

    async def _events(self, place: Place, last_chunk: int, config: GetSessionConfig) -> list[Event]:
        recent, after = config.num_recent_events, config.after_timestamp
        if recent == 0:
            return []
        if recent is None and after is None:
            chunks = [
                await self._reader.whole(place.session, place.events(c), place.cache_key(c))
                for c in range(last_chunk + 1)
            ]
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
        agent = app_scope(self.store, app_name)
        users = (
            [user_id]
            if user_id is not None
            else [entry["id"] async for key, _ in agent.keys("user.") if (entry := await agent.get(key))]
        )
        app_state = await agent.get(layout.APP_STATE)
        sessions = []
        for user in users:
            sessions += await self._sessions_of(app_name, user, app_state)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def _sessions_of(self, app_name: str, user_id: str, app_state: Any) -> list[Session]:
        scope = user_scope(self.store, app_name, user_id)
        user_state = await scope.get(layout.USER_STATE)
        found = []
        async for key, _ in scope.keys("session."):
            entry = await scope.get(key)
            if entry is None:
                continue
            place = self._place(app_name, user_id, entry["id"])
            record = await place.load()
            if record is not None:
                found.append(_session(place, record, app_state, user_state))
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
        return layout.unwrapped(await user_scope(self.store, app_name, user_id).get(layout.USER_STATE))

    async def append_event(self, session: Session, event: Event) -> Event:
        """Add the event and apply its state delta in one atomic write on top of what storage holds;
        the session object gets the event and the delta. Raises ADK's ``StaleSessionError``, nothing
        written, when a key the delta writes was written by someone else since ``session`` was loaded
        (reload it and append again)."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        place = self._place(session.app_name, session.user_id, session.id)
        delta = layout.split_delta(_json_safe(event.actions.state_delta if event.actions else {}))
        item = layout.event_item(event.model_dump_json(exclude_none=True), event.author, _text(event))
        write = EventWrite(place, item, event.timestamp, delta, seen.of(session), session.last_update_time)
        seen.mark(session, await write.run())
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)


def _session(place: Place, record: dict[str, Any], app: Any, user: Any, events: list[Event] | None = None) -> Session:
    """The ``Session`` of a stored record and app and user state objects, marked with what it has seen."""
    own = record.get("state")
    session = Session(
        id=place.session_id,
        app_name=place.app_name,
        user_id=place.user_id,
        events=events or [],
        last_update_time=record["updated"],
        state=layout.merged_state(layout.unwrapped(app), layout.unwrapped(user), layout.unwrapped(own)),
    )
    seen.mark(session, seen.seen(app, user, own))
    return session


def _check_batches(url: str) -> None:
    """Refuse a store where a batch across scopes is not atomic (InvalidRequest naming it)."""
    try:
        capabilities_of(url).require("cross_scope_batches", url)
    except InvalidRequest as refused:
        raise InvalidRequest(
            "KeepstateSessionService writes each event with its app: and user: state in one atomic batch "
            f"across scopes, and {refused.message}"
        ) from None


def _json_safe(state: dict[str, Any]) -> dict[str, Any]:
    """The state as JSON data, as ADK's own services store it (its own helper, same warnings)."""
    return _session_util.make_json_safe_state(state)


def _text(event: Event) -> str | None:
    """The event's text parts, joined: what the console shows of it."""
    if event.content is None or not event.content.parts:
        return None
    texts = [part.text for part in event.content.parts if part.text]
    return "\n".join(texts) if texts else None
