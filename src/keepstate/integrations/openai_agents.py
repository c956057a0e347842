"""The OpenAI Agents SDK's ``Session`` on any keepstate store: ``KeepstateSession(session_id, url)``.

A session's items are the JSON items of one list, ``items``, in the session scope of the agent
``openai-agents`` (``store.scope("session", agent="openai-agents", id=session_id)``), and the
session is registered with the platform on its first add: ``keepstate serve``'s console lists it
and shows its history as a conversation. Each write is one atomic list operation of the store, so
the guarantees are the store's, across processes: ``add_items`` is one append (two processes lose
and duplicate nothing), ``pop_item`` one pop (each item is taken by exactly one caller), and
``get_items(limit)`` reads only the last ``limit`` items (one version of the list), so a turn
costs the same at the thousandth message as at the first. A session holds what one keepstate list holds: 1 MiB of
items as compact JSON (``add_items`` past that raises ``keepstate.TooLarge`` and adds nothing).
"""

from __future__ import annotations

from typing import Any, cast

import keepstate
from keepstate.protocol import MAX_LIST_READ

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as error:  # the extra is not installed
    raise ImportError("keepstate.integrations.openai_agents needs the OpenAI Agents SDK: "
                      "pip install 'keepstate[openai-agents]'") from error

AGENT = "openai-agents"
"""The agent whose session scope holds the items, and under which the sessions are registered."""
KEY = "items"
"""The key of the list of a session's items, in that scope."""
READ_TRIES = 64
"""A read of more than ``MAX_LIST_READ`` items that a write keeps interrupting gives up after this many."""


class KeepstateSession:
    """The ``Session`` protocol of the OpenAI Agents SDK (``get_items``, ``add_items``, ``pop_item``,
    ``clear_session``) over a keepstate store, for ``Runner.run(..., session=...)``.

    ``KeepstateSession(session_id, url)`` opens the store at ``url`` (``memory://``, ``sqlite:///…``,
    ``postgresql://…``, ``redis://…``) and closes it with the session; ``from_store`` shares an open
    store and leaves it open. ``session_id`` names the keepstate session: 1–200 of
    ``A-Z a-z 0-9 . _ : -`` (``keepstate.InvalidKey`` otherwise). After ``close()`` every call
    raises ``RuntimeError``, as the SDK's own sessions do.
    """

    session_id: str
    session_settings: SessionSettings

    def __init__(self, session_id: str, url: str, *,
                 session_settings: SessionSettings | dict[str, Any] | None = None) -> None:
        settings = _settings(session_settings)
        store = keepstate.open(url)
        try:
            self._start(session_id, store, settings, owns_store=True)
        except BaseException:
            store.close()
            raise

    @classmethod
    def from_store(cls, session_id: str, store: keepstate.Store, *,
                   session_settings: SessionSettings | dict[str, Any] | None = None) -> KeepstateSession:
        """A session on an open store, which its ``close()`` leaves open."""
        session = cls.__new__(cls)
        session._start(session_id, store, _settings(session_settings), owns_store=False)
        return session

    def _start(self, session_id: str, store: keepstate.Store, settings: SessionSettings, *, owns_store: bool) -> None:
        self._scope = store.ascope("session", agent=AGENT, id=session_id)
        self.session_id, self.session_settings = session_id, settings
        self._store, self._owns_store = store, owns_store
        self._registered = self._closed = False

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest ``limit`` items, oldest first; without ``limit``, ``session_settings.limit``;
        with neither, all of them. ``0`` gives none and a negative limit all (as the SDK's SQLite
        session). Up to ``MAX_LIST_READ`` (1,000) items is one tail read however long the session is;
        more are read in pages that all see one version of the list (a write in between: read again).
        """
        self._check_open()
        count = resolve_session_limit(limit, self.session_settings)
        if count == 0:
            return []
        if count is not None and 0 < count <= MAX_LIST_READ:
            items = await self._scope.tail(KEY, count)
        else:
            items = await self._paged(None if count is None or count < 0 else count)
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` after the session's last item, in one atomic write (registering the
        session with the platform first, once per session object)."""
        self._check_open()
        if not items:
            return
        if not self._registered:
            await self._store.aregister_session(self.session_id, AGENT)
            self._registered = True
        await self._scope.append(KEY, list(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (None when there is none); atomic, so among several
        callers, in any processes, each item is returned to exactly one."""
        self._check_open()
        return cast("TResponseInputItem | None", await self._scope.pop(KEY))

    async def clear_session(self) -> None:
        """Remove every item of the session (the session stays registered)."""
        self._check_open()
        await self._scope.delete(KEY)

    def close(self) -> None:
        """End the session; the store too if the session opened it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_store:
            self._store.close()

    async def aclose(self) -> None:
        """``close()`` from async code: the running loop's connections are closed on that loop first."""
        if self._closed:
            return
        if self._owns_store:
            await self._store.aclose()
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    async def _paged(self, last: int | None) -> list[Any]:
        """The last ``last`` items (all when None), in pages of one version of the list."""
        for _ in range(READ_TRIES):
            items = await self._one_version(last)
            if items is not None:
                return items
        raise keepstate.VersionConflict(f"the items of session {self.session_id!r} kept changing while being "
                                        f"read ({READ_TRIES} tries); read fewer at a time with get_items(limit)")

    async def _one_version(self, last: int | None) -> list[Any] | None:
        """The items, or None when the list changed between two of the pages read."""
        first = await self._scope.items(KEY, 0, MAX_LIST_READ if last is None else 1)
        start = 0 if last is None else max(0, first.length - last)
        items = list(first.items) if last is None else []
        position = start + len(items)
        while position < first.length:
            page = await self._scope.items(KEY, position, MAX_LIST_READ)
            if page.version != first.version or not page.items:
                return None
            items += page.items
            position += len(page.items)
        return items


def _settings(settings: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    """The SDK's own normalisation (a dict becomes ``SessionSettings``; unknown fields: TypeError)."""
    return SessionSettings() if settings is None else coerce_session_settings(settings)
