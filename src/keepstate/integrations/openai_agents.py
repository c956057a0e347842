"""The OpenAI Agents SDK's ``Session`` on any keepstate store: ``KeepstateSession(session_id, url)``.

A session's items live in the session scope of the agent ``openai-agents``
(``store.scope("session", agent="openai-agents", id=session_id)``), and the session is registered
with the platform on its first add: ``keepstate serve``'s console lists it and shows its history
as a conversation. The newest items are the JSON items of one list, ``items``; a keepstate list
holds at most 1 MiB, so when an add would pass it, the whole of ``items`` is archived, in the same
atomic batch that starts ``items`` afresh with the new items, as the next *part*: the lists
``history.0001``, ``history.0002``... (oldest first; ``history`` counts them). Keys sort in
history order, so the console reads the parts, then ``items``. A session that never passed 1 MiB
is ``items`` alone, as sessions were before parts existed.

Every change goes through ``items``, which makes the guarantees the store's own, across processes:
``add_items`` is one append (two processes lose and duplicate nothing); archiving, and ``pop_item``
taking the newest item back out of the last part once ``items`` is empty, are batches conditional
on the version of ``items`` (and of ``history``), so a concurrent append or pop makes them retry
instead of being stranded or repeated; ``pop_item`` is one pop otherwise (each item taken by exactly
one caller). ``get_items(limit)`` reads only the last ``limit`` items, from ``items`` backwards, so
a turn costs the same at the thousandth message as at the first. A read that spans parts checks
that ``history`` kept its version while it read (parts change only with it), so it sees one state
of the session. An item whose JSON alone passes 1 MiB is refused with ``keepstate.TooLarge`` and
nothing is written. An add past 1 MiB and a clear are each one batch, which holds at most 100
writes: one add holds at most about 98 MiB, and ``clear_session`` drops a session of up to 98 parts.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import keepstate
from keepstate.protocol import MAX_LIST_READ
from keepstate.scope import backoff_seconds
from keepstate.values import MAX_VALUE_BYTES, encode_all, list_size

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as error:  # the extra is not installed
    raise ImportError(
        "keepstate.integrations.openai_agents needs the OpenAI Agents SDK: pip install 'keepstate[openai-agents]'"
    ) from error

AGENT = "openai-agents"
"""The agent whose session scope holds the items, and under which the sessions are registered."""
KEY = "items"
"""The key of the list of a session's newest items, in that scope."""
PARTS = "history"
"""The key of the number of archived parts, in that scope; part ``n`` is the list ``part_key(n)``."""
READ_TRIES = 64
"""A read that writes keep interrupting gives up after this many tries."""
WRITE_TRIES = 64
"""A conditional write that concurrent writes keep refusing gives up after this many tries."""
_NONE_LEFT = object()


def part_key(number: int) -> str:
    """The list holding archived part ``number`` (1, 2, ...), named to sort in history order."""
    return f"{PARTS}.{number:04d}"


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

    def __init__(
        self, session_id: str, url: str, *, session_settings: SessionSettings | dict[str, Any] | None = None
    ) -> None:
        settings = _settings(session_settings)
        store = keepstate.open(url)
        try:
            self._start(session_id, store, settings, owns_store=True)
        except BaseException:
            store.close()
            raise

    @classmethod
    def from_store(
        cls,
        session_id: str,
        store: keepstate.Store,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> KeepstateSession:
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
        session). Up to ``MAX_LIST_READ`` (1,000) items that ``items`` holds are one tail read
        however long the session is; more are read in pages, parts included, that all see one
        state of the session (a write in between: read again)."""
        self._check_open()
        count = resolve_session_limit(limit, self.session_settings)
        if count == 0:
            return []
        if count is not None and 0 < count <= MAX_LIST_READ:
            items = await self._scope.tail(KEY, count)
            if len(items) == count:
                return cast(list[TResponseInputItem], items)
        return cast(list[TResponseInputItem], await self._read(None if count is None or count < 0 else count))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` after the session's last item, all of them or none, in one atomic write
        (registering the session with the platform first, once per session object): an append to
        ``items``, or, past 1 MiB, the batch that archives it and starts it again."""
        self._check_open()
        if not items:
            return
        if not self._registered:
            await self._store.aregister_session(self.session_id, AGENT)
            self._registered = True
        added = list(items)
        for attempt in range(WRITE_TRIES):
            try:
                await self._scope.append(KEY, added)
                return
            except keepstate.TooLarge:
                pieces = _pieces(added)  # TooLarge for an item over 1 MiB alone
            try:
                await self._archive_and_restart(pieces)
                return
            except keepstate.VersionConflict:
                await asyncio.sleep(backoff_seconds(attempt))
        raise self._busy("add_items")

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (None when there is none); atomic, so among several
        callers, in any processes, each item is returned to exactly one. Once ``items`` is empty,
        the last part becomes ``items`` again, minus the item returned, in one conditional batch."""
        self._check_open()
        for attempt in range(WRITE_TRIES):
            item = await self._scope.pop(KEY)
            if item is not None:
                return cast(TResponseInputItem, item)
            parts, parts_version = await self._parts()
            live = await self._scope.items(KEY, 0, 1)
            if live.length:
                continue  # items came in after the pop
            if parts == 0:
                if (await self._parts())[1] == parts_version:
                    return None  # empty when read, with no part before or after
                continue
            try:
                item = await self._unarchive_last(parts, parts_version, live.version)
            except keepstate.VersionConflict:
                await asyncio.sleep(backoff_seconds(attempt))
                continue
            if item is not _NONE_LEFT:
                return cast(TResponseInputItem, item)
        raise self._busy("pop_item")

    async def clear_session(self) -> None:
        """Remove every item of the session, every part with ``items``, in one batch (the session
        stays registered)."""
        self._check_open()
        for attempt in range(WRITE_TRIES):
            parts, parts_version = await self._parts()
            try:
                async with self._scope.batch() as batch:
                    batch.delete(KEY)
                    for number in range(1, parts + 1):
                        batch.delete(part_key(number))
                    batch.delete(PARTS, if_version=parts_version)
                return
            except keepstate.VersionConflict:
                await asyncio.sleep(backoff_seconds(attempt))
        raise self._busy("clear_session")

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
            raise keepstate.StoreClosed(f"this {type(self).__name__} is closed: make a new one to use it")

    def _busy(self, call: str) -> keepstate.VersionConflict:
        return keepstate.VersionConflict(
            f"{call} on session {self.session_id!r} kept meeting concurrent writes ({WRITE_TRIES} tries)"
        )

    async def _parts(self) -> tuple[int, int]:
        """(the number of archived parts, the version of that count: 0 when there is none)."""
        found = await self._scope.get_versioned(PARTS)
        return int(found.value or 0), found.version

    async def _archive_and_restart(self, pieces: list[list[Any]]) -> None:
        """One batch: ``items`` as it is (unless empty) and every piece but the last become new
        parts, and the last piece is ``items``; VersionConflict when ``items`` or the count changed."""
        parts, parts_version = await self._parts()
        live, live_version = await self._whole(KEY)
        archived = ([live] if live else []) + pieces[:-1]
        async with self._scope.batch() as batch:
            for offset, part in enumerate(archived, start=1):
                batch.put(part_key(parts + offset), part, if_version=0)
            batch.put(KEY, pieces[-1], if_version=live_version)
            batch.put(PARTS, parts + len(archived), if_version=parts_version)

    async def _unarchive_last(self, parts: int, parts_version: int, live_version: int) -> Any:
        """The last item of the last part, taken out in one batch that makes the rest of that part
        ``items`` (empty at ``live_version``); VersionConflict when either changed; ``_NONE_LEFT``
        when the part was empty (it is gone then too; parts are never archived empty)."""
        rest, _ = await self._whole(part_key(parts))
        item = rest.pop() if rest else _NONE_LEFT
        async with self._scope.batch() as batch:
            batch.put(KEY, rest, if_version=live_version)
            batch.delete(part_key(parts))
            if parts == 1:
                batch.delete(PARTS, if_version=parts_version)
            else:
                batch.put(PARTS, parts - 1, if_version=parts_version)
        return item

    async def _read(self, last: int | None) -> list[Any]:
        """The last ``last`` items (all when None), parts included, as one state of the session."""
        for _ in range(READ_TRIES):
            parts, parts_version = await self._parts()
            items = await self._one_version(KEY, last)
            number = parts
            while items is not None and number > 0 and (last is None or len(items) < last):
                older = await self._one_version(part_key(number), None if last is None else last - len(items))
                items = None if older is None else older + items
                number -= 1
            if items is not None and (await self._parts())[1] == parts_version:
                return items
        raise keepstate.VersionConflict(
            f"the items of session {self.session_id!r} kept changing while being "
            f"read ({READ_TRIES} tries); read fewer at a time with get_items(limit)"
        )

    async def _whole(self, key: str) -> tuple[list[Any], int]:
        """All the items of list ``key`` and its version, read in pages of one version."""
        for _ in range(READ_TRIES):
            first = await self._scope.items(key, 0, MAX_LIST_READ)
            items = await self._one_version(key, None, first)
            if items is not None:
                return items, first.version
        raise keepstate.VersionConflict(f"{key!r} of session {self.session_id!r} kept changing while being read")

    async def _one_version(self, key: str, last: int | None, first: keepstate.Items | None = None) -> list[Any] | None:
        """The last ``last`` items of list ``key`` (all when None), or None when it changed between
        two of the pages read."""
        if first is None:
            first = await self._scope.items(key, 0, MAX_LIST_READ if last is None else 1)
        start = 0 if last is None else max(0, first.length - last)
        items = list(first.items) if last is None else []
        position = start + len(items)
        while position < first.length:
            page = await self._scope.items(key, position, MAX_LIST_READ)
            if page.version != first.version or not page.items:
                return None
            items += page.items
            position += len(page.items)
        return items


def _pieces(items: list[Any]) -> list[list[Any]]:
    """``items`` cut in order into lists of at most 1 MiB each; ``keepstate.TooLarge`` (nothing
    written yet) when one item alone passes it. Measured with the store's own encoder and list size
    (``keepstate.values``, below the public API because no public call sizes a value), so a piece is
    never one the store would refuse."""
    pieces: list[list[Any]] = [[]]
    size = list_size((), 0)
    for index, encoded in enumerate(encode_all(items)):
        alone = list_size((len(encoded),), 1)
        if alone > MAX_VALUE_BYTES:
            raise keepstate.TooLarge(
                f"item {index} is {alone - 2} bytes as JSON: a session item holds at most {MAX_VALUE_BYTES - 2}"
            )
        grown = size + len(encoded) + (1 if pieces[-1] else 0)
        if grown > MAX_VALUE_BYTES:
            pieces.append([])
            grown = alone
        pieces[-1].append(items[index])
        size = grown
    return pieces


def _settings(settings: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    """The SDK's own normalisation (a dict becomes ``SessionSettings``; unknown fields: TypeError)."""
    return SessionSettings() if settings is None else coerce_session_settings(settings)
