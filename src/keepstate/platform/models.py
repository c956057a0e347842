"""The platform's own view of a request: who calls (``Caller``) and a page of a listing (``Page``).

The records the store keeps (keys, sessions, runs, invocations) are ``keepstate.stores.records``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..stores.records import RunContext


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a request: a key (admin/member/worker) or a run token (``role == "run"``). ``name`` is
    the key's name (None for an unnamed key and for a run token): what a decision records as its maker."""

    env: str
    role: str
    key_id: str
    run: RunContext | None = None
    key_hash: str | None = None
    """The key's secret hash, for ``Platform.recheck`` (None for a run token)."""
    name: str | None = None

    @property
    def label(self) -> str:
        """How records name this caller to people: the key's name, or its id when it has none."""
        return self.name or self.key_id

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True, slots=True)
class Page:
    """A page of a list and the cursor for the next one (None at the end)."""

    items: list[Any]
    next: str | None
