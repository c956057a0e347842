"""The platform's own view of a request: who calls (``Caller``) and a page of a listing (``Page``).

The records the store keeps (keys, sessions, runs, invocations) are ``keepstate.stores.records``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..stores.records import RunContext


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a request: a key (admin/member/worker) or a run token (``role == "run"``)."""

    env: str
    role: str
    key_id: str
    run: RunContext | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True, slots=True)
class Page:
    """A page of a list and the cursor for the next one (None at the end)."""

    items: list[Any]
    next: str | None
