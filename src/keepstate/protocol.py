"""The HTTP API's fixed names and bounds, shared by the server and the SDKs: one copy of each,
with the checks of the arguments they bound.

Value limits (sizes, nesting) are ``keepstate.values``'; these are the protocol's own.
"""

from __future__ import annotations

import math

from .errors import InvalidRequest

RUN_TOKEN_HEADER = "x-agentos-run-token"
"""The header carrying a run token (the seed's name, so seed agents work unchanged)."""
IDEMPOTENCY_KEY_HEADER = "idempotency-key"
"""The header of a write's idempotency key: a repeat with the same key gets the first answer again."""

DEFAULT_PAGE = 100
MAX_PAGE = 1000
"""A listing's ``limit``: its default and its largest (larger ones are clamped)."""

MAX_RUN_WAIT_S = 60.0
"""``GET /v0/runs/{id}?wait=`` holds the answer at most this long."""
MAX_CLAIM_WAIT_S = 30.0
"""``POST /v0/invocations/claim`` long-polls at most this long."""
MAX_AGENTS = 100
"""A claim names at most this many agents."""
MAX_KEY_NAME = 200
"""A key's name (its label) is at most this many characters, however the key is made."""

MAX_EMIT_EVENTS = 100
"""A worker's emit writes 1 to this many events (more: 413 ``too_large``)."""
MAX_RUN_EVENTS = 10_000
"""A run's log holds at most this many events: an emit that would pass it is 413 ``too_large``."""
MAX_EVENT_BYTES = 64 * 1024
"""An event's ``data``, as compact UTF-8 JSON, at most this many bytes."""
EVENT_TYPE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-")
MAX_EVENT_TYPE = 64
DEFAULT_EVENT_TYPE = "message"
PLATFORM_EVENT_PREFIX = "run."
"""Event types the platform alone writes (``run.status``, ``run.output``)."""

MAX_LIST_READ = 1000
"""``tail`` and ``items`` read at most this many items."""
MAX_BATCH_OPS = 100
"""An atomic batch has 1 to this many ops."""
MAX_TTL_S = 10 * 365 * 24 * 3600
"""``ttl_seconds`` at most ten years."""


def _integer(value: object, name: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidRequest(f"{name} must be an integer from {low} to {high}, got {value!r:.40}")
    return value


def ttl_ms(ttl_seconds: object) -> int | None:
    """``ttl_seconds`` (a number > 0, or None) as whole milliseconds (at least 1)."""
    if ttl_seconds is None:
        return None
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int | float) or not (0 < ttl_seconds <= MAX_TTL_S):
        raise InvalidRequest(f"ttl_seconds must be a number above 0 and at most {MAX_TTL_S}, got {ttl_seconds!r:.40}")
    return max(1, math.ceil(ttl_seconds * 1000))


def check_key_name(name: object) -> str | None:
    """A key's name: absent (None), or a string of at most ``MAX_KEY_NAME`` characters."""
    if name is not None and (not isinstance(name, str) or len(name) > MAX_KEY_NAME):
        shown = f"{len(name):,} characters" if isinstance(name, str) else type(name).__name__
        raise InvalidRequest(f"a key's name must be a string of at most {MAX_KEY_NAME} characters, got {shown}")
    return name


def check_tail(n: object) -> int:
    return _integer(n, "tail", 1, MAX_LIST_READ)


def check_range(start: object, limit: object) -> tuple[int, int]:
    return _integer(start, "start", 0, 2**62), _integer(limit, "limit", 1, MAX_LIST_READ)


def check_keep_last(keep_last: object) -> int:
    return _integer(keep_last, "keep_last", 0, 2**62)


def check_by(by: object) -> int:
    return _integer(by, "by", -(2**63), 2**63 - 1)
