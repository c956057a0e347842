"""Two processes at one LangGraph thread's head, stepped through pipes so a turn happens by construction.

Each writer is a spawned process (its own KeepstateSaver, as two programs would have) that obeys its
pipe: ``("append", text)`` adds one message and answers ``("done", report)``. The loser's appends
stop just before each guarded commit and say ``"planned"``; the test then has the other writer move the
head, so the commit meets a real ``VersionConflict`` from the store. After ``turns.LOSSES_BEFORE_CLAIM``
such losses the loser claims the head and stops once more (``"claimed"``); the other writer's next
append must see that claim and wait (it says ``"waiting"``), and once the claim is gone it says
``"resumed"`` and goes on only when told. No step depends on how fast either process runs: the
patience of a claim and of a put are set far beyond any test's life, so only the pipes order them.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any

import conversations

OPENER = "keepstate KeepstateSaver"
THREAD = "forced-turns"
PATIENCE_S = 3600.0
"""A claim and a put wait this long: never reached, so the scheduler cannot end a wait the pipes hold."""


def _patient() -> None:
    from keepstate.integrations.langgraph import saver, turns

    turns.CLAIM_PATIENCE_S = PATIENCE_S
    saver.PUT_PATIENCE_S = PATIENCE_S


def loser(location: str, conn: Connection) -> None:
    """The writer made to lose: each commit while ``armed`` waits for ``"go"`` after telling the test."""
    from keepstate.errors import VersionConflict
    from keepstate.integrations.langgraph import KeepstateSaver, keys, turns

    _patient()
    commit, state = KeepstateSaver._commit, {"armed": False, "losses": 0, "claimed": False}

    def stepped(self: KeepstateSaver, scope: Any, *args: Any) -> None:
        if state["armed"]:
            holds_claim = turns.CLAIM in scope.get(keys.head(args[2]))  # (thread_id, thread_key, ns, ...)
            if holds_claim:
                state["armed"], state["claimed"] = False, True
            conn.send("claimed" if holds_claim else "planned")
            assert conn.recv() == "go"
        try:
            commit(self, scope, *args)
        except VersionConflict:
            state["losses"] += 1
            raise

    KeepstateSaver._commit = stepped  # type: ignore[method-assign,assignment]
    _serve(location, conn, lambda: state.update(armed=True, losses=0, claimed=False), state)


def honourer(location: str, conn: Connection) -> None:
    """The writer that must honour a claim: says ``"waiting"`` when it first sees one, ``"resumed"``
    when the claim is gone, and then waits for ``"go"``."""
    from keepstate.integrations.langgraph import turns

    _patient()
    waits, state = turns.Turn.waits, {"waited": False}

    def watched(self: turns.Turn, head: Any) -> bool:
        waiting = waits(self, head)
        if waiting and not state["waited"]:
            state["waited"] = True
            conn.send("waiting")
        elif not waiting and state["waited"]:
            state["waited"] = False
            conn.send("resumed")
            assert conn.recv() == "go"
        return waiting

    turns.Turn.waits = watched  # type: ignore[method-assign]
    _serve(location, conn, lambda: None, {})


def _serve(location: str, conn: Connection, arm: Any, report: dict[str, Any]) -> None:
    conversation = conversations.OPENERS[OPENER](location, THREAD)
    try:
        while (command := conn.recv()) is not None:
            kind, text = command
            if kind == "append-contested":
                arm()
            conversation.append(text)
            conn.send(("done", dict(report)))
    finally:
        conversation.close()
