"""Where an ADK session lives in keepstate, and how its state and events are written there (no I/O).

Names: an ADK app is a keepstate *agent*, a user an end user, a session a session id. A name made
of keepstate's key characters (at most ``VERBATIM_MAX`` of them) is used as it is, so the console
shows it; any other (an email, spaces, a long id) becomes ``h:`` and a hash of it. A verbatim name
never starts with ``h:``, so two names never meet.

Keys of one ADK session ``S`` of user ``U`` in app ``A``:

- agent scope of ``A``: ``app_state`` (the ``app:`` keys) and ``user.{U}`` (``{"id": U}``: the users
  with sessions, for listing every user's);
- user scope of ``(A, U)``: ``user_state`` (the ``user:`` keys) and ``session.{S}`` (``{"id": S}``,
  written only if absent: the one place "already exists" is decided);
- session scope of ``(A, S)``, keys under ``U.`` because ADK lets two users have sessions of one id:
  ``U.session`` (``{"id", "user_id", "app_name", "created", "updated", "chunks", "state"}``) and the
  events, in order, in ``U.events`` and then, past 1 MiB (keepstate's bound on one list), in
  ``U.events.1``, ``U.events.2``... ``chunks`` names the chunks past the first as object members, so
  the merge patches that add them from several processes only ever add (a counter could go back).

State values are kept wrapped, ``{"key": [value, tag]}``, because every state change is a JSON merge
patch applied in the store: a patch replaces a list whole, which is ADK's ``dict.update``, where it
would merge a dict into the old one and drop nulls. ``tag`` is a random name of the write that set
the value (``new_tag``): a session object remembers the tags it loaded (``seen``), so a key whose
tag differs now was written by someone else since (values written before tags read as tag None).

An event is a list item ``{"role": author, "content": its text, "event": the event's JSON}``:
the console shows a list of ``{role, content}`` as a conversation, and ``event`` round-trips.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any, NamedTuple

import orjson

VERBATIM_MAX = 120
HASHED = "h:"
_VERBATIM = re.compile(rf"[A-Za-z0-9._:\-]{{1,{VERBATIM_MAX}}}")

APP_STATE, USER_STATE = "app_state", "user_state"
APP_PREFIX, USER_PREFIX, TEMP_PREFIX = "app:", "user:", "temp:"


def name(text: str) -> str:
    """``text`` as a keepstate name: itself when it is one (and not ``h:…``), else ``h:`` + a hash."""
    if _VERBATIM.fullmatch(text) and not text.startswith(HASHED):
        return text
    return HASHED + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def user_entry(user_id: str) -> str:
    return f"user.{name(user_id)}"


def session_entry(session_id: str) -> str:
    return f"session.{name(session_id)}"


def record_key(user_id: str) -> str:
    return f"{name(user_id)}.session"


def events_key(user_id: str, chunk: int) -> str:
    """The list holding the events of chunk ``chunk`` (0, 1, ... each at most 1 MiB)."""
    base = f"{name(user_id)}.events"
    return base if chunk == 0 else f"{base}.{chunk}"


def last_chunk(record: dict[str, Any]) -> int:
    """The newest events chunk a session record knows of."""
    return max((int(chunk) for chunk in record.get("chunks") or {}), default=0)


def new_tag() -> str:
    """A name for one write, never reused (64 random bits)."""
    return secrets.token_hex(8)


def wrapped(delta: dict[str, Any], tag: str) -> dict[str, list[Any]]:
    """A state delta as the merge patch that applies it with ``dict.update``'s meaning, its keys
    marked as written by ``tag``."""
    return {key: [value, tag] for key, value in delta.items()}


def tags(stored: Any) -> dict[str, str | None]:
    """The tag of each key of a wrapped object (``{}`` for none)."""
    if not isinstance(stored, dict):
        return {}
    return {key: _tag(value) for key, value in stored.items() if isinstance(value, list) and value}


def _tag(wrapped_value: list[Any]) -> str | None:
    return wrapped_value[1] if len(wrapped_value) > 1 and isinstance(wrapped_value[1], str) else None


def unwrapped(stored: Any) -> dict[str, Any]:
    """The state a wrapped object holds (``{}`` for none)."""
    if not isinstance(stored, dict):
        return {}
    return {key: value[0] for key, value in stored.items() if isinstance(value, list) and value}


class Parts(NamedTuple):
    """A state (or delta) split by where it lives, prefixes removed: ``app:``, ``user:``, the session's."""

    app: dict[str, Any]
    user: dict[str, Any]
    session: dict[str, Any]


PREFIXES = {"app": APP_PREFIX, "user": USER_PREFIX, "session": ""}
"""How each part's keys are named in a ``Session``'s state."""


def split_delta(delta: dict[str, Any]) -> Parts:
    """(app, user, session) parts of a state delta, prefixes removed; ``temp:`` keys dropped."""
    parts = Parts({}, {}, {})
    for key, value in delta.items():
        if key.startswith(APP_PREFIX):
            parts.app[key.removeprefix(APP_PREFIX)] = value
        elif key.startswith(USER_PREFIX):
            parts.user[key.removeprefix(USER_PREFIX)] = value
        elif not key.startswith(TEMP_PREFIX):
            parts.session[key] = value
    return parts


def merged_state(app: dict[str, Any], user: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
    """The state a ``Session`` shows: its own keys, then ``app:`` and ``user:`` ones."""
    return {**session, **{APP_PREFIX + k: v for k, v in app.items()}, **{USER_PREFIX + k: v for k, v in user.items()}}


def event_item(event_json: str, author: str, text: str | None) -> dict[str, Any]:
    """The list item of an event, from its JSON (``model_dump_json``)."""
    return {"role": author, "content": text or "", "event": orjson.loads(event_json)}


def event_json(item: Any) -> bytes:
    """The event JSON an item holds (for ``Event.model_validate_json``)."""
    return orjson.dumps(item["event"])
