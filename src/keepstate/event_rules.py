"""What a worker's run event may be: I/O-free, shared by the server (``platform/run_events.py``) and
``keepstate.testing``'s recorder, which refuses what the server refuses without loading the server.

An emit is 1-100 events ``{type?, data}``; a type is 1-64 of ``a-z 0-9 . _ -`` (default ``message``),
never starting ``run.`` (the platform's own); data is any JSON value of at most 64 KiB.
"""

from __future__ import annotations

import functools

from . import values
from .errors import InvalidRequest, InvalidValue, TooLarge
from .protocol import (
    DEFAULT_EVENT_TYPE,
    EVENT_TYPE_CHARS,
    MAX_EMIT_EVENTS,
    MAX_EVENT_BYTES,
    MAX_EVENT_TYPE,
    PLATFORM_EVENT_PREFIX,
)
from .stores.records import NewEvent


def check_events(given: object) -> list[NewEvent]:
    """An emit's events, checked whole before anything is written; their data encoded together (one
    scan for all, as an append's items are), a bad one named by its index."""
    if not isinstance(given, list) or not given:
        raise InvalidRequest(f"events must be a list of 1-{MAX_EMIT_EVENTS} events {{type?, data}}")
    if len(given) > MAX_EMIT_EVENTS:
        raise TooLarge(f"an emit writes at most {MAX_EMIT_EVENTS} events, not {len(given)}")
    kinds = [check_shape(event, index) for index, event in enumerate(given)]
    try:
        encoded = values.encode_all([event["data"] for event in given])
    except InvalidValue:
        encoded = [_encoded(event["data"], index) for index, event in enumerate(given)]
    for index, data in enumerate(encoded):
        if len(data) > MAX_EVENT_BYTES:
            raise TooLarge(f"events[{index}].data is {len(data)} bytes as JSON, over the limit of {MAX_EVENT_BYTES}")
    return list(zip(kinds, encoded, strict=True))


def check_shape(event: object, index: int) -> str:
    """An event's type, once it is an object ``{type?, data}``: a few C-level checks and a cached look at
    its type (an emit's events mostly share one or two), the message built only for a refusal."""
    if not isinstance(event, dict) or "data" not in event or not event.keys() <= _FIELDS:
        raise InvalidRequest(f"events[{index}] must be an object {{type?, data}} with data")
    kind = event.get("type", DEFAULT_EVENT_TYPE)
    if not isinstance(kind, str) or not 0 < len(kind) <= MAX_EVENT_TYPE:
        raise InvalidRequest(f"events[{index}].type{_NOT_A_TYPE}")
    refusal = _type_refusal(kind)  # cached: at most 256 types of at most MAX_EVENT_TYPE characters
    if refusal:
        raise InvalidRequest(f"events[{index}].type{refusal}")
    return kind


_FIELDS = frozenset(("type", "data"))
_NOT_A_TYPE = f" must be 1-{MAX_EVENT_TYPE} of a-z 0-9 . _ -"


@functools.lru_cache(maxsize=256)
def _type_refusal(kind: str) -> str:
    """What is wrong with a type of 1-``MAX_EVENT_TYPE`` characters, to follow ``events[i].type`` (empty:
    nothing)."""
    if not set(kind) <= EVENT_TYPE_CHARS:
        return _NOT_A_TYPE
    if kind.startswith(PLATFORM_EVENT_PREFIX):
        return f": types starting {PLATFORM_EVENT_PREFIX!r} are the platform's own"
    return ""


def _encoded(data: object, index: int) -> bytes:
    try:
        return values.encode(data)
    except InvalidValue as error:
        raise InvalidValue(error.message, path=f"$.events[{index}].data" + error.path[1:]) from None
