"""The harness store's records and the pure rules behind them: no I/O in this module.

Records are frozen dataclasses with the seed's fields in snake_case. Times are integer
milliseconds since the Unix epoch, as the seed's ``Date.now()`` numbers are, so records imported
from a Durable Object keep their times unchanged. JSON values are plain Python values (``None`` is
JSON ``null``), checked and encoded by ``keepstate.values`` on the way in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

from ..errors import InvalidKey, InvalidRequest
from ..values import MAX_VALUE_BYTES, check_size, encode, encode_all

OperationStatus = Literal["queued", "running", "done", "unanswered"]
STATUSES: tuple[str, ...] = get_args(OperationStatus)
OPEN_STATUSES = ("queued", "running")
SETTLED_STATUSES = ("done", "unanswered")

DEFAULT_PREFIX = "harness_"
DEFAULT_CHUNK_SIZE = 256 * 1024
"""Bytes of a log entry's JSON per row; a larger entry continues on further rows."""
MAX_ENTRY_BYTES = 16 * MAX_VALUE_BYTES
"""A log entry, as compact UTF-8 JSON. Other values (state, input, meta, result) keep the 1 MiB rule."""
MAX_ID_LENGTH = 512
_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}")


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session, as stored. ``state`` is ``None`` until the harness writes some."""

    id: str
    parent: str | None
    state: Any
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """One operation. ``seq`` is its submission order across the whole store (increasing, never reused)."""

    session: str
    id: str
    seq: int
    status: OperationStatus
    input: Any
    meta: Any
    result: Any
    reason: str | None
    created_at: int
    settled_at: int | None


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log entry. ``seq`` is its position in the log, stable when the entry is replaced by id."""

    seq: int
    id: str | None
    data: Any
    created_at: int


@dataclass(frozen=True, slots=True)
class LogAppend:
    """One entry to append; with an ``id`` already in the log it replaces that entry in place."""

    data: Any
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """An operation that ended with the harness's result."""

    result: Any = None


@dataclass(frozen=True, slots=True)
class Unanswered:
    """An operation that ended without a result, and why."""

    reason: str


OperationOutcome = Done | Unanswered


class Enqueued(NamedTuple):
    """What ``enqueue`` returns: the stored record, and whether this call created it."""

    record: OperationRecord
    accepted: bool


def check_prefix(prefix: object) -> str:
    """A table prefix: a plain identifier of at most 40 characters, never starting with ``_cf_``."""
    if isinstance(prefix, str) and prefix.startswith("_cf_"):
        raise InvalidRequest("the harness store prefix must not start with _cf_")
    if not isinstance(prefix, str) or _PREFIX.fullmatch(prefix) is None:
        raise InvalidRequest(f"invalid harness store prefix {prefix!r:.60}: use a letter, then letters, digits or _")
    return prefix


def check_chunk_size(size: object) -> int:
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise InvalidRequest(f"chunk_size must be a positive number of bytes, got {size!r:.40}")
    return size


def check_id(value: object, what: str = "id") -> str:
    """Ids and names are any non-empty text of at most 512 characters, without U+0000 or lone surrogates."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_LENGTH or "\x00" in value:
        raise InvalidKey(f"{what} must be 1-{MAX_ID_LENGTH} characters without U+0000, got {value!r:.80}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidKey(f"{what} holds a lone surrogate") from None
    return value


def check_text(value: object, what: str) -> str:
    """Free text (a reason): any string without U+0000 or lone surrogates, at most 1 MiB."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{what} must be text, got {type(value).__name__}")
    encode_value(value, what)
    return value


def check_position(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidRequest(f"{what} must be a non-negative integer, got {value!r:.40}")
    return value


def encode_value(value: Any, what: str) -> str:
    """A single-row JSON value (state, input, meta, result) as canonical JSON text, at most 1 MiB."""
    data = encode(value)
    check_size(len(data), what)
    return data.decode("utf-8")


def encode_entries(entries: Sequence[object]) -> list[tuple[str | None, bytes]]:
    """Entries to append as ``(id, canonical JSON bytes)``, each at most ``MAX_ENTRY_BYTES``.

    The JSON is checked for all entries together (``encode_all``): per entry, that check was most
    of an append's own time."""
    ids: list[str | None] = []
    values: list[Any] = []
    for entry in entries:
        if not isinstance(entry, LogAppend):
            raise InvalidRequest(f"log entries must be LogAppend, got {type(entry).__name__}")
        ids.append(None if entry.id is None else check_id(entry.id, "entry id"))
        values.append(entry.data)
    datas = encode_all(values)
    largest = max(map(len, datas), default=0)
    if largest > MAX_ENTRY_BYTES:
        raise InvalidRequest(f"log entry is {largest} bytes, over the limit of {MAX_ENTRY_BYTES}")
    return list(zip(ids, datas, strict=True))


def check_outcome(outcome: object) -> tuple[OperationStatus, str, str | None]:
    """``(status, result JSON, reason)`` of an outcome, as ``settle`` stores them."""
    if isinstance(outcome, Done):
        return "done", encode_value(outcome.result, "result"), None
    if isinstance(outcome, Unanswered):
        return "unanswered", "null", check_text(outcome.reason, "reason")
    raise InvalidRequest(f"an outcome is Done or Unanswered, got {type(outcome).__name__}")


def check_statuses(status: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """Statuses to filter on (``None``: all); a bare string is one status."""
    if status is None:
        return None
    statuses = (status,) if isinstance(status, str) else tuple(status)
    for name in statuses:
        if name not in STATUSES:
            raise InvalidRequest(f"unknown operation status {name!r:.40}: use one of {', '.join(STATUSES)}")
    return statuses
