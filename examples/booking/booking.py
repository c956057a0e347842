"""The seed's booking flow as a runtime over ``keepstate.sessions``.

Call 1 ("book a table ..."): fetch availability from the supplier, keep the *original API items*, an
expiry for the choice, and the dependency frame in the session; reply with numbered options.
Call 2 ("2"): map the choice back to the original item, prepare the exact booking request, and run
the booking as an *effect*: the executing marker is committed first, and any number of concurrent
copies of this call (on any worker) produce exactly one booking, because each runs inside the
session's lease and only the first still finds the pending selection.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from keepstate.sessions import SessionManager, SessionStore
from keepstate.sessions.state import now_ms

CONFIG = {"agent": "booking", "version": 1, "tools": ["availability", "create_booking"]}
CONFIG_HASH = hashlib.sha256(json.dumps(CONFIG, sort_keys=True).encode()).hexdigest()[:16]
SELECTION_TTL_MS = 5 * 60 * 1000


class Supplier:
    """A stand-in booking API: every booking is one line appended to ``ledger`` (the side effect)."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    async def availability(self, party_size: int) -> list[dict[str, Any]]:
        await asyncio.sleep(0.02)
        return [{"id": "slot-1900", "time": "19:00", "table": 4}, {"id": "slot-2030", "time": "20:30", "table": 7}]

    async def create_booking(self, request: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.05)  # the network call
        booking = {"booking_id": f"B-{request['slot_id']}-{os.getpid()}", **request}
        with self.ledger.open("a") as f:
            f.write(json.dumps(booking) + "\n")
        return booking


async def handle(store: SessionStore, supplier: Supplier, sid: str, text: str, context: dict[str, Any]) -> str:
    """One user message in session ``sid``; returns the assistant's reply."""
    manager = SessionManager(store, CONFIG_HASH, ttl_seconds=3600)
    async with manager.open(sid) as session:
        state = session.state
        state.set_host_context(context)  # credentials in the context are dropped, never stored
        state.add_message("user", text)
        if text.strip().isdigit():
            reply = await _confirm(session, supplier, int(text.strip()))
        else:
            reply = await _select(session, supplier)
        state.add_message("assistant", reply)
        return reply


async def _select(session: Any, supplier: Supplier) -> str:
    state = session.state
    state.stack.append({"dependency": "availability", "status": "running"})
    items = await supplier.availability(party_size=2)
    state.stack[-1]["status"] = "done"
    state.set_fact("party_size", 2, source="user")
    state.pending_selection = {"items": items, "expires_at": now_ms() + SELECTION_TTL_MS}
    return "Which time? " + ", ".join(f"{n}) {item['time']}" for n, item in enumerate(items, 1))


async def _confirm(session: Any, supplier: Supplier, choice: int) -> str:
    state = session.state
    selection = state.pending_selection
    if selection is None or selection["expires_at"] <= now_ms():
        return "There is nothing to confirm."
    item = selection["items"][choice - 1]
    state.references["slot"] = {"id": item["id"], "table": item["table"]}
    request = {"slot_id": item["id"], "party_size": state.get_fact("party_size"),
               "tenant": state.host_context.get("tenant", {}).get("id")}
    state.pending_selection, state.pending_confirmation = None, request
    async with session.effect("create_booking", request) as effect:
        effect.result = await supplier.create_booking(request)
    state.pending_confirmation = None
    return f"Booked {item['time']}: {effect.result['booking_id']}"
