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
from ...stores.records import NULL, Entry, ListPage

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


def pretty(value: Any) -> str:
    """A JSON value as indented text (keys in their stored order)."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def pretty_bytes(data: bytes) -> str | None:
    """Canonical JSON bytes as indented text; None for ``null`` (nothing to show)."""
    return None if data == NULL else pretty(orjson.loads(data))


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation: its role, and its content as text (a string as it is, any
    other content as indented JSON, flagged so the template can set it apart)."""

    index: int
    role: str
    text: str
    structured: bool


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


def is_message(item: Any) -> bool:
    """A ``{role, content}`` object: a string role and a content (more fields are allowed)."""
    return isinstance(item, dict) and isinstance(item.get("role"), str) and "content" in item


def message(index: int, item: dict[str, Any]) -> Message:
    content = item["content"]
    if isinstance(content, str):
        return Message(index, item["role"], content, False)
    return Message(index, item["role"], pretty(content), True)


def json_value(key: str, entry: Entry) -> StateValue:
    """A value that is not a list, as indented JSON with its version."""
    return StateValue(key, entry.version, "json", text=pretty(orjson.loads(entry.data)),
                      expires_at=entry.expires_at)


def list_value(key: str, page: ListPage, start: int, page_size: int) -> StateValue:
    """Items ``start`` … of a list, as a conversation when every item shown is a message, else as
    numbered items; with the ends of the pages before and after it (pages of ``page_size``)."""
    parsed = [orjson.loads(item) for item in page.items]
    end = start + len(parsed)
    earlier = start if start > 0 else None
    later = min(end + page_size, page.length) if end < page.length else None
    common: dict[str, Any] = {"start": start, "length": page.length, "earlier": earlier, "later": later}
    if parsed and all(is_message(item) for item in parsed):
        messages = tuple(message(start + n, item) for n, item in enumerate(parsed))
        return StateValue(key, page.version, "conversation", messages=messages, **common)
    items = tuple(Item(start + n, pretty(item)) for n, item in enumerate(parsed))
    return StateValue(key, page.version, "list", items=items, **common)


def page_before(end: int, page_size: int) -> tuple[int, int] | None:
    """The ``(start, count)`` of the page of a list that ends just before item ``end``, at most
    ``page_size`` items; None when ``end`` leaves nothing before it (then the list's last page is read)."""
    if end <= 0:
        return None
    start = max(0, end - page_size)
    return start, end - start


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


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent on the Agents page: its runs waiting, running and held, and its workers' last claim
    (None: not known). ``capped`` names the statuses whose count stopped at a bound (shown as ``N+``)."""

    name: str
    queued: int
    running: int
    held: int
    last_claim_at: int | None = None
    capped: frozenset[str] = frozenset()


def run_ids(text: str | None, limit: int) -> list[str]:
    """The run ids of a status poll (``ids=a,b,c``), deduplicated, at most ``limit``."""
    if not text:
        return []
    seen = dict.fromkeys(part for part in text.split(",") if part)
    return list(seen)[:limit]


def statuses(runs: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The status poll's answer: each run's status and last change, by id."""
    return {run.id: {"status": run.status, "updated_at": run.updated_at} for run in runs}
