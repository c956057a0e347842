"""What an ADK session object has seen of its state, and when an append through it is stale (no I/O).

A ``Session`` this service hands out carries, in ADK's private ``_storage_update_marker`` (where
ADK's own services keep their revision), the tag (``layout.tags``) of every ``app:``, ``user:`` and
session key it was loaded with, and then the tags of what it wrote itself. A key whose tag in
storage differs from the one the object saw was written by someone else since: an update the object
computed from its value would overwrite one it never saw, so the append is refused. Keys nobody
else wrote merge, whatever else changed.
"""

from __future__ import annotations

from typing import Any

import orjson
from google.adk.sessions.session import Session

from . import layout

Seen = dict[str, dict[str, str | None]]
"""Per part (``app``, ``user``, ``session``): each key's tag as the session object saw it."""
_MARKER = "keepstate:"


def seen(app: Any, user: Any, session_state: Any) -> Seen:
    """What a session object loaded from these stored (wrapped) objects has seen."""
    return {"app": layout.tags(app), "user": layout.tags(user), "session": layout.tags(session_state)}


def mark(session: Session, what: Seen) -> None:
    """Record on ``session`` what it has seen (canonical, so equal views give equal sessions)."""
    session._storage_update_marker = _MARKER + orjson.dumps(what, option=orjson.OPT_SORT_KEYS).decode()


def of(session: Session) -> Seen | None:
    """What ``session`` has seen; None when this service did not hand it out (built by hand, rebuilt
    from JSON, which drops private fields, or loaded by another service)."""
    marker = session._storage_update_marker
    if not marker or not marker.startswith(_MARKER):
        return None
    found = orjson.loads(marker.removeprefix(_MARKER))
    return {part: dict(found.get(part) or {}) for part in layout.PREFIXES}


def changed(what: Seen, delta: layout.Parts, stored: dict[str, Any]) -> list[str]:
    """The keys ``delta`` writes (as a ``Session`` names them) whose tag in ``stored`` (per part, the
    wrapped object as stored now) is not the one ``what`` saw."""
    found = []
    for part, prefix in layout.PREFIXES.items():
        now = layout.tags(stored.get(part))
        found += [prefix + key for key in getattr(delta, part) if now.get(key) != what[part].get(key)]
    return found


def names(delta: layout.Parts) -> list[str]:
    """The keys ``delta`` writes, as a ``Session`` names them."""
    return [prefix + key for part, prefix in layout.PREFIXES.items() for key in getattr(delta, part)]


def after_write(what: Seen, delta: layout.Parts, tag: str) -> Seen:
    """What the object has seen once its own write ``tag`` of ``delta`` landed."""
    return {part: {**keys, **dict.fromkeys(getattr(delta, part), tag)} for part, keys in what.items()}
