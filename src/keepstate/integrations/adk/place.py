"""The scopes and keys of one ADK session in a store (see ``layout``)."""

from __future__ import annotations

from typing import Any

from ... import embedded
from ...scope import AsyncScope
from . import layout


class Place:
    """Where the session ``session_id`` of ``user_id`` in ``app_name`` lives."""

    def __init__(self, store: embedded.Store, app_name: str, user_id: str, session_id: str) -> None:
        self.app_name, self.user_id, self.session_id = app_name, user_id, session_id
        self.app = app_scope(store, app_name)
        self.user = user_scope(store, app_name, user_id)
        self.session = store.ascope("session", agent=layout.name(app_name), id=layout.name(session_id))
        self.index = layout.session_entry(session_id)
        self.record = layout.record_key(user_id)

    def events(self, chunk: int) -> str:
        return layout.events_key(self.user_id, chunk)

    def cache_key(self, chunk: int) -> tuple[str, str, str, int]:
        return self.app_name, self.user_id, self.session_id, chunk

    async def load(self) -> dict[str, Any] | None:
        """The session's record, or None when the session does not exist."""
        return record_of(await self.session.get(self.record))


def record_of(stored: Any) -> dict[str, Any] | None:
    """A stored record, or None when it is no session's (absent, or left by a racing delete)."""
    return stored if isinstance(stored, dict) and "id" in stored else None


def app_scope(store: embedded.Store, app_name: str) -> AsyncScope:
    return store.ascope("agent", agent=layout.name(app_name))


def user_scope(store: embedded.Store, app_name: str, user_id: str) -> AsyncScope:
    return store.ascope("user", agent=layout.name(app_name), id=layout.name(user_id))
