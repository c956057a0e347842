"""Fair turns at a thread's head: a put that keeps losing the race for it claims the next turn.

A put is planned against the head and commits only if the head has not moved since. A writer whose
plan is slower than another process's plain puts (it merges, because the other moved the head) can
lose for as long as the other keeps writing, and so wait out the other's whole run. After
``LOSSES_BEFORE_CLAIM`` losses in a row it writes a claim into the head: a compare-and-set that moves
the head's version, not its checkpoint. A writer that reads another's claim waits until the claim is
gone (the claimant's commit writes the head without it), for at most ``CLAIM_PATIENCE_S`` by its own
clock, so a claimant that stopped delays the others that long and no longer, whatever the machines'
clocks say. Readers see the same checkpoint id throughout.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from keepstate import Scope
from keepstate.errors import VersionConflict
from keepstate.scope import Versioned

LOSSES_BEFORE_CLAIM = 2
CLAIM_PATIENCE_S = 2.0
"""How long a writer honours one claim it saw: a claimant plans and commits one put in far less."""
POLL_S = 0.002
"""How often a writer that honours a claim reads the head again."""
CLAIM = "claim"


class Turn:
    """One put's place at the head of one namespace: whether to wait, and its claim when it made one."""

    def __init__(self) -> None:
        self.token: str | None = None
        """This put's latest claim: drawn with ``secrets``, not ``uuid``, which LangGraph's tests and
        users' own code may patch (a put must not take ids from the messages it stores)."""
        self._honoured: tuple[str, float] | None = None
        """The other writer's claim this put waits for, and when it first saw it (monotonic)."""

    def waits(self, head: Versioned) -> bool:
        """Whether ``head`` holds another writer's claim that this put still honours."""
        claim = head.value.get(CLAIM) if head.version else None
        if claim is None or claim == self.token:
            return False
        if self._honoured is None or self._honoured[0] != claim:
            self._honoured = (claim, time.monotonic())
        return time.monotonic() - self._honoured[1] < CLAIM_PATIENCE_S

    def claim(self, scope: Scope, key: str, head: Versioned, losses: int) -> int | None:
        """The head version to commit against: ``head``'s own, or, after enough losses, the version
        this put's claim gave it (``None`` when another writer moved the head first)."""
        held = self.token is not None and head.value.get(CLAIM) == self.token
        if losses < LOSSES_BEFORE_CLAIM or not head.version or held:
            return head.version
        self.token = secrets.token_hex(16)  # a new claim each time: the others honour each one afresh
        claimed: dict[str, Any] = {**head.value, CLAIM: self.token}
        try:
            return scope.put(key, claimed, if_version=head.version)
        except VersionConflict:
            return None
