"""The ``lists`` of a session fork, checked before anything is asked of the store (no I/O here).

``{"AGENT/KEY": N}``: the session-scope list KEY of agent AGENT is cut to its first N items in the fork
("edit message N+1 and regenerate"). Anything else is a clear 400, never a store error.
"""

from __future__ import annotations

from .. import values
from ..errors import InvalidRequest
from ..stores.session_forks import Cuts

MAX_CUTS = 100
"""At most this many lists named in one fork."""
MAX_KEEP = 2**31 - 1
"""A list keeps at most this many items (no list of 1 MiB holds more): past it, the whole list."""


def fork_cuts(lists: object) -> Cuts:
    """``lists`` as ``(agent, key)`` → items kept; InvalidRequest for anything but an object of at most
    ``MAX_CUTS`` ``"AGENT/KEY"`` names (each part in the key charset) to integers 0 … ``MAX_KEEP``."""
    if lists is None:
        return {}
    if not isinstance(lists, dict) or len(lists) > MAX_CUTS:
        raise InvalidRequest(f'lists must be an object of at most {MAX_CUTS} "AGENT/KEY" names to item counts')
    return {_name(name): _keep(name, keep) for name, keep in lists.items()}


def _name(name: str) -> tuple[str, str]:
    agent, _, key = name.partition("/")
    if not (values.is_key(agent) and values.is_key(key)):
        raise InvalidRequest(f'lists: {name[:80]!r} is not "AGENT/KEY" (each 1-200 of A-Z a-z 0-9 . _ : -)')
    return agent, key


def _keep(name: str, keep: object) -> int:
    if isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep <= MAX_KEEP:
        raise InvalidRequest(f"lists: {name[:80]!r} must map to an integer from 0 to {MAX_KEEP}")
    return keep
