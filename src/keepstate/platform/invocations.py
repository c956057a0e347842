"""The worker side: claim an invocation, heartbeat it, end it (complete, fail, hold).

A claim is one atomic UPDATE in the store (``status = 'queued'`` is the guard), so one invocation
goes to exactly one worker however many server processes share the store. The same guard holds the
claimer's key live: a claim already waiting when its key is revoked takes nothing (and answers 401),
and a revocation ends the invocations its key holds (``Platform.end_key``). A claim with ``wait``
long-polls: a cheap read first, the claiming write only when something is queued, woken at once
by this process's own changes and every ``CLAIM_POLL_S`` for other processes'.

Every claim, also one that finds nothing, says that a worker serves its agents (``GET /v0/agents``):
recorded in the store at most once per ``AGENT_TOUCH_S`` per agent by each process, so a claim
costs what it did, bar one small upsert every few seconds.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from .. import values
from ..clock import now_ms
from ..errors import InvalidRequest, Unauthorized
from ..protocol import MAX_AGENTS, MAX_CLAIM_WAIT_S
from ..stores.records import Claimed, Outcome, StoredRun
from . import auth
from .models import Caller
from .service import Platform, require

CLAIM_POLL_S = 0.1
AGENT_TOUCH_S = 5.0
"""How often a process records, per (environment, agent), that a worker claimed for it."""
TOUCHED_LIMIT = 10_000
"""How many (environment, agent) pairs a process remembers before it starts over (a miss costs one upsert)."""


class Invocations:
    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.repo = platform.repo
        self._touched: dict[tuple[str, str], float] = {}  # (env, agent) -> when recorded (loop time)
        self.touch_every = AGENT_TOUCH_S

    def _lease_until(self) -> int:
        return now_ms() + round(self.platform.lease_seconds * 1000)

    async def claim(self, caller: Caller, agents: list[str], wait: float) -> Claimed | None:
        """The oldest queued invocation of ``agents`` in the caller's environment, or None after ``wait``."""
        require(caller, "worker", "admin")
        loop = asyncio.get_running_loop()
        await self._touch(caller.env, agents, loop.time())
        deadline = loop.time() + min(wait, MAX_CLAIM_WAIT_S)
        while True:
            event = self.platform.changed.current()
            if await self.repo.has_queued(caller.env, agents, now_ms()):
                claimed = await self._claim_now(caller.env, agents, caller.key_id)
                if claimed is not None:
                    return claimed
                await self.platform.recheck(caller)  # the claim's guard refuses a revoked key: say so
            left = deadline - loop.time()
            if left <= 0:
                await self.platform.recheck(caller)
                return None
            await self.platform.changed.wait(min(left, CLAIM_POLL_S), event)

    async def _touch(self, env: str, agents: list[str], at: float) -> None:
        """Record the claim's agents in the store unless this process did within ``touch_every``."""
        due = [agent for agent in agents if at - self._touched.get((env, agent), -math.inf) >= self.touch_every]
        if not due:
            return
        if len(self._touched) > TOUCHED_LIMIT:
            self._touched.clear()
        await self.repo.touch_agents(env, due, now_ms())
        self._touched.update(((env, agent), at) for agent in due)

    async def _claim_now(self, env: str, agents: list[str], claimer: str) -> Claimed | None:
        token = auth.new_run_token()
        claimed = await self.repo.claim(env, agents, auth.hash_secret(token), self._lease_until(), now_ms(), claimer)
        if claimed is None:
            return None
        self.platform.changed.notify()
        return Claimed(claimed.invocation, claimed.run, token, self.platform.lease_seconds)

    async def authorize(self, token: str | None, invocation_id: str) -> None:
        """401 unless ``token`` is the live run token of invocation ``invocation_id``: the check a
        route makes before it reads a body. The call itself re-checks atomically in the store."""
        _check_invocation_id(invocation_id)
        caller = await self.platform.authenticate_run(token)
        if caller.run is None or caller.run.invocation_id != invocation_id:
            raise Unauthorized("run token is not valid for this invocation")

    async def heartbeat(self, token: str | None, invocation_id: str) -> dict[str, Any]:
        _check_invocation_id(invocation_id)
        now = now_ms()
        cancel = await self.repo.heartbeat(invocation_id, _token_hash(token), now, self._lease_until())
        if cancel is None:
            raise Unauthorized("run token is not valid for this invocation (not running, or lease ran out)")
        return {"lease_seconds": self.platform.lease_seconds, "cancel_requested": cancel}

    async def finish(self, token: str | None, invocation_id: str, kind: str, body: dict[str, Any]) -> StoredRun:
        _check_invocation_id(invocation_id)
        data = outcome_data(kind, body)
        run = await self.repo.finish(invocation_id, _token_hash(token), Outcome(kind, data), now_ms())
        if run is None:
            raise Unauthorized("run token is not valid for this invocation (not running, or lease ran out)")
        self.platform.changed.notify()
        return run

    async def sweep(self) -> int:
        """Running invocations past their lease become lost and their runs interrupted."""
        lost = await self.repo.expire(now_ms())
        if lost:
            self.platform.changed.notify()
        return lost


def _token_hash(token: str | None) -> str:
    if not token:
        raise Unauthorized("missing run token: send x-agentos-run-token")
    return auth.hash_secret(token)


def outcome_data(kind: str, body: dict[str, Any]) -> bytes:
    """The JSON an invocation ends with: output, ``{type, message}`` error, or hold request."""
    if kind == "fail":
        error = body.get("error")
        if not isinstance(error, dict) or not all(isinstance(error.get(f), str) for f in ("type", "message")):
            raise InvalidRequest("error must be an object {type: string, message: string}")
        value: Any = error
    else:
        value = body.get("output" if kind == "complete" else "request")
    data = values.encode(value)
    values.check_size(len(data), "output" if kind == "complete" else kind)
    return data


def check_agents(agents: object) -> list[str]:
    if not isinstance(agents, list) or not agents or len(agents) > MAX_AGENTS:
        raise InvalidRequest(f"agents must be a list of 1-{MAX_AGENTS} agent names")
    if not all(values.is_key(agent) for agent in agents):
        raise InvalidRequest("each agent name must be 1-200 of A-Z a-z 0-9 . _ : -")
    return sorted(set(agents))


def _check_invocation_id(invocation_id: str) -> None:
    """An id no invocation can have: no token is valid for it (401, as for any other wrong id)."""
    if not values.is_key(invocation_id):
        raise Unauthorized("run token is not valid for this invocation (no such invocation)")
