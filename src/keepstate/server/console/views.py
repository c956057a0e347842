"""What the console's templates show, made from the store's records: no I/O, no markup.

Pages read records (runs, sessions, state entries) and hand them here; what comes back is plain
text and numbers that a template prints with autoescaping on, so nothing a store holds can ever
become markup. Stored JSON is canonical bytes: it is parsed only to be indented for reading.

A state value that is a list of ``{role, content}`` objects is a *conversation* (what an agent keeps
as its history) and is shown as messages, roles apart; any other list as its items, numbered; any
other value as indented JSON. Lists are read in pages from their end (``tail``/``items``), so a long
history costs what its last page costs.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ...stores.documents import SNIPPET_START
from ...stores.records import NULL, AgentStats, Entry, ListPage
from . import conversations

FINAL_STATUSES = frozenset({"done", "failed", "interrupted", "cancelled", "expired"})
"""Statuses a run never leaves: the live updates stop watching a run once it has one."""


def when(ms: int | None) -> str:
    """A stored time (ms since the epoch) for reading: UTC, to the second."""
    if ms is None:
        return "—"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(ms: int | None) -> str:
    """A stored time as ISO 8601, for a ``<time datetime>`` attribute."""
    if ms is None:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(timespec="milliseconds")


pretty = conversations.pretty
"""A JSON value as indented text (keys in their stored order)."""


def pretty_bytes(data: bytes) -> str | None:
    """Canonical JSON bytes as indented text; None for ``null`` (nothing to show)."""
    return None if data == NULL else pretty(orjson.loads(data))


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation: who said it, the side it sits on (``data-role``: user,
    assistant, system or tool), and its content as text (anything but text as indented JSON, flagged
    so the template can set it apart)."""

    index: int
    role: str
    text: str
    structured: bool
    side: str = "assistant"


@dataclass(frozen=True, slots=True)
class Item:
    """One item of a list that is not a conversation, numbered from 0."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class StateValue:
    """One key of a namespace as a page shows it.

    ``kind`` is ``conversation``, ``list`` or ``json``. For lists, ``start`` is the index of the first
    item shown and ``length`` the whole list's; ``earlier`` is the end of the page before (None at the
    start), ``later`` the end of the page after (None at the end)."""

    key: str
    version: int
    kind: str
    text: str = ""
    messages: tuple[Message, ...] = ()
    items: tuple[Item, ...] = ()
    start: int = 0
    length: int = 0
    expires_at: int | None = None
    earlier: int | None = None
    later: int | None = None


def message(index: int, said: conversations.Said) -> Message:
    return Message(index, said.role, said.text, said.structured, said.side)


def json_value(key: str, entry: Entry) -> StateValue:
    """A value that is not a list, as indented JSON with its version."""
    return StateValue(key, entry.version, "json", text=pretty(orjson.loads(entry.data)), expires_at=entry.expires_at)


def list_value(key: str, page: ListPage, start: int, page_size: int) -> StateValue:
    """Items ``start`` … of a list, as a conversation when every item shown is a message, else as
    numbered items; with the ends of the pages before and after it (pages of ``page_size``)."""
    parsed = [orjson.loads(item) for item in page.items]
    if parsed and all(conversations.is_message(item) for item in parsed):
        return conversation_value(key, page.version, parsed, start, page.length, page_size)
    common = paging(start, len(parsed), page.length, page_size)
    items = tuple(Item(start + n, pretty(item)) for n, item in enumerate(parsed))
    return StateValue(key, page.version, "list", items=items, **common)


def conversation_value(
    key: str,
    version: int,
    parsed: list[Any],
    start: int,
    length: int,
    page_size: int,
    read: conversations.Reader = conversations.chat_message,
) -> StateValue:
    """Items ``start`` … of a conversation ``length`` long, each read as a message by ``read``."""
    messages = tuple(message(start + n, read(item)) for n, item in enumerate(parsed))
    common = paging(start, len(parsed), length, page_size)
    return StateValue(key, version, "conversation", messages=messages, **common)


def paging(start: int, shown: int, length: int, page_size: int) -> dict[str, Any]:
    """Where a page of ``shown`` items from ``start`` sits in a list of ``length``: the ends of the
    pages before and after it."""
    end = start + shown
    earlier = start if start > 0 else None
    later = min(end + page_size, length) if end < length else None
    return {"start": start, "length": length, "earlier": earlier, "later": later}


@dataclass(frozen=True, slots=True)
class Cuttable:
    """A list a fork may cut (the session page's **List to cut**): ``AGENT/KEY``, as the API's fork
    ``lists`` names it, and how many items it holds now."""

    name: str
    length: int


def cuttable(sections: Sequence[Any]) -> list[Cuttable]:
    """The lists of the state sections a session page shows (an agent's keys read as values, not a
    framework adapter's scope: its conversation is kept with bookkeeping that a cut would leave behind)."""
    return [
        Cuttable(f"{section.agent}/{value.key}", value.length)
        for section in sections
        for value in section.values
        if value.kind != "json"
    ]


def page_before(end: int, page_size: int) -> tuple[int, int] | None:
    """The ``(start, count)`` of the page of a list that ends just before item ``end``, at most
    ``page_size`` items; None when ``end`` leaves nothing before it (then the list's last page is read)."""
    if end <= 0:
        return None
    start = max(0, end - page_size)
    return start, end - start


def spans(keys: Sequence[str], lengths: Sequence[int], start: int, count: int) -> list[tuple[str, int, int]]:
    """Items ``start`` … ``start + count`` of lists read one after another (``keys`` of ``lengths``), as
    ``(key, start within it, count)`` reads, in order, empty ones left out."""
    found = []
    offset = 0
    for key, length in zip(keys, lengths, strict=True):
        begin, end = max(start, offset), min(start + count, offset + length)
        if begin < end:
            found.append((key, begin - offset, end - begin))
        offset += length
    return found


def size(count: int) -> str:
    """A size in bytes for reading: ``532 B``, ``2.1 KiB``, ``1.0 MiB``."""
    if count < 1024:
        return f"{count} B"
    if round(count / 1024, 1) < 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1024 * 1024):.1f} MiB"


def snippet_parts(snippet: str) -> list[tuple[str, bool]]:
    """A search hit's snippet as ``(text, matched)`` parts: the stores mark each matched word between
    ``**`` (``stores.documents.SNIPPET_START``), which the page shows highlighted, as text."""
    parts = snippet.split(SNIPPET_START)
    return [(part, index % 2 == 1) for index, part in enumerate(parts) if part]


UNSERVED_AFTER_MS = 120_000
"""A worker asks for work at least every 30 s while it runs (a claim waits at most that long): an
agent with no claim for two minutes has nobody serving it."""


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent on the Agents page, as ``GET /v0/agents`` answers: its runs queued, running and held,
    and when a worker last claimed for it (None: never). ``unserved``: no claim within
    ``UNSERVED_AFTER_MS`` of ``now``; ``stuck``: unserved with runs waiting (the row stands out)."""

    name: str
    queued: int
    running: int
    held: int
    last_claim_at: int | None
    unserved: bool

    @property
    def stuck(self) -> bool:
        return self.unserved and self.queued > 0


def agent_row(stats: AgentStats, now: int) -> AgentRow:
    last = stats.last_claim_at
    unserved = last is None or now - last > UNSERVED_AFTER_MS
    return AgentRow(stats.agent, stats.count("queued"), stats.count("running"), stats.count("held"), last, unserved)


def ago(ms: int | None, now: int) -> str:
    """How long before ``now`` a stored time was, for reading: ``12 s ago``, ``3 min ago``, ``2 h ago``,
    ``4 days ago``; ``never`` for None."""
    if ms is None:
        return "never"
    seconds = max(0, now - ms) // 1000
    for unit, size in (("day", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if unit == 'day' and count != 1 else ''} ago"
    return f"{seconds} s ago"


def capped(count: int, cap: int) -> str:
    """A count for a badge: ``7``, or ``99+`` past ``cap``."""
    return f"{cap}+" if count > cap else str(count)


@dataclass(frozen=True, slots=True)
class Decided:
    """A run's decision as the Run page shows it: approved or denied, by whom (a key's name or id;
    None for a decision recorded before the maker was), when, and its data as indented JSON."""

    approved: bool
    by: str | None
    at: int | None
    data: str | None


def decision_of(data: bytes) -> Decided | None:
    """The stored decision ``{approved, data, by, at}``; None when there is none."""
    if data == NULL:
        return None
    found = orjson.loads(data)
    if not isinstance(found, dict):
        return Decided(False, None, None, pretty(found))
    by, at, payload = found.get("by"), found.get("at"), found.get("data")
    return Decided(
        found.get("approved") is True,
        by if isinstance(by, str) else None,
        at if isinstance(at, int) and not isinstance(at, bool) else None,
        None if payload in (None, {}) else pretty(payload),
    )


@dataclass(frozen=True, slots=True)
class EventRow:
    """One event of a run's log as its page shows it (and as the script adds a live one): its ``seq``,
    type, data as indented JSON and time."""

    seq: int
    type: str
    text: str
    at: int


def event_row(event: Any) -> EventRow:
    """A stored event (``{seq, type, data, at}``, data canonical JSON) as a row of the Events table."""
    return EventRow(event.seq, event.type, pretty(orjson.loads(event.data)), event.at)


def run_ids(text: str | None, limit: int) -> list[str]:
    """The run ids of a status poll (``ids=a,b,c``), deduplicated, at most ``limit``."""
    if not text:
        return []
    seen = dict.fromkeys(part for part in text.split(",") if part)
    return list(seen)[:limit]


def statuses(runs: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The status poll's answer: each run's status and last change, by id."""
    return {run.id: {"status": run.status, "updated_at": run.updated_at} for run in runs}
