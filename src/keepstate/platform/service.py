"""The rules of the API over a store's platform facet: who may do what, and what each call means.

``Platform`` authenticates callers, checks roles and visibility (owners see their sessions and
runs, other members get 404, admins see their whole environment, environments never meet) and
turns requests into the facet's atomic operations. Invocations and the State API live in
``invocations.py`` and ``state.py``, over the same object.
"""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

from .. import values
from ..clock import now_ms
from ..errors import Forbidden, InvalidRequest, NotFound, NotHeld, Unauthorized
from ..protocol import MAX_RUN_WAIT_S, check_key_name
from ..stores.base import Database, PlatformFacet, StateFacet
from ..stores.records import (
    ACTIVE,
    DEFAULT_QUEUE_TIMEOUT_MS,
    ROLES,
    AgentStats,
    RunFilter,
    StoredInvocation,
    StoredKey,
    StoredRun,
    StoredSession,
)
from . import auth
from .forking import fork_cuts
from .models import Caller, Page
from .notify import Notifier

RUN_POLL_S = 0.25
RUN_CALLER_LIMIT = 10_000
"""How many run tokens' callers a process keeps (a few hundred bytes each) before it starts over."""
QUEUE_TIMEOUT_RANGE_S = (1, 86_400)
"""A run's ``queue_timeout`` and the server's ``--queue-timeout``: from a second to a day."""
DEFAULT_QUEUE_TIMEOUT_S = DEFAULT_QUEUE_TIMEOUT_MS / 1000


def require_run_token(token: str | None) -> str:
    """The run token of a request, or 401 when it sent none."""
    if not token:
        raise Unauthorized("missing run token: send x-agentos-run-token")
    return token


def lease_alive(lease_until: int | None) -> bool:
    """Whether a run token's freshly read lease end (None: its invocation is not running) is still ahead."""
    return lease_until is not None and lease_until >= now_ms()


RECORDED_AGENTS = 10_000
"""How many (session, agent) pairs ``writable_session`` remembers as recorded before it starts over."""


class Platform:
    """Environments, keys, sessions and runs. Every method raises KeepstateError subclasses only."""

    def __init__(
        self,
        database: Database,
        repo: PlatformFacet,
        state: StateFacet,
        lease_seconds: float = 30.0,
        queue_timeout: float = DEFAULT_QUEUE_TIMEOUT_S,
    ) -> None:
        self.database = database
        self.repo = repo
        self.state = state
        self.lease_seconds = lease_seconds
        self.queue_timeout_ms = queue_timeout_ms(queue_timeout)
        """How long a run started without its own ``queue_timeout`` may stay queued."""
        self.changed = Notifier(repo.events.written)
        self._run_callers: dict[str, tuple[str, Caller]] = {}  # token -> its hash and caller; see authenticate_run
        self._session_agents: set[tuple[str, str, tuple[int, int, str], str]] = set()  # see writable_session

    async def aclose(self) -> None:
        await self.database.aclose()

    async def ping(self) -> None:
        await self.database.ping()

    # credentials
    async def authenticate(self, authorization: str | None) -> Caller:
        secret = auth.bearer(authorization)
        if secret is None:
            raise Unauthorized("missing credential: send Authorization: Bearer KEY")
        key_hash = auth.hash_secret(secret)
        key = await self.repo.key_by_hash(key_hash)
        if key is None or key.revoked:
            raise Unauthorized("unknown or revoked key")
        return Caller(key.env, key.role, key.id, key_hash=key_hash, name=key.name)

    async def recheck(self, caller: Caller) -> None:
        """401 if the caller's key was revoked since ``authenticate``: a request that waited (a long poll)
        checks again after reading what it answers and before answering, so nothing read after a
        revocation is handed out (a read before the check was made while the key was still live)."""
        if caller.key_hash is None:
            return
        key = await self.repo.key_by_hash(caller.key_hash)
        if key is None or key.revoked:
            raise Unauthorized("unknown or revoked key")

    async def authenticate_run(self, token: str | None) -> Caller:
        """The caller behind a run token, valid only while its invocation runs and its lease lasts.

        What a token stands for (invocation, run, env, agent, session, user, owner) never changes,
        so it is read once and kept in ``_run_callers``; whether the token is still valid is read
        from the store on every call (``token_lease``, one single-table read), because another
        server process sharing the store may end the invocation at any moment. The kept caller's
        ``run.lease_until`` is as first read: the lease is only ever judged from the fresh read.
        """
        token = require_run_token(token)
        token_hash, caller = self.known_run_caller(token)
        if caller is not None:
            lease_until = await self.repo.token_lease(token_hash)
            if not lease_alive(lease_until):
                await self.reject_run_token(token, token_hash, lease_until)
            return caller
        ctx = await self.repo.token_context(token_hash)
        if ctx is None or not lease_alive(ctx.lease_until):
            await self.reject_run_token(token, token_hash, None if ctx is None else ctx.lease_until)
        assert ctx is not None
        return self._remember_run_caller(token, token_hash, Caller(ctx.env, "run", ctx.owner, ctx))

    def known_run_caller(self, token: str) -> tuple[str, Caller | None]:
        """The token's hash, and its caller if this process already knows it (not yet a validity check).

        Kept callers are looked up by the token itself, as a session cache would: hashing it on
        every request was a measurable share of a state GET, and the hash is kept with the caller."""
        known = self._run_callers.get(token)
        return known if known is not None else (auth.hash_secret(token), None)

    async def reject_run_token(self, token: str, token_hash: str, lease_until: int | None) -> NoReturn:
        """Forget a dead token and raise 401; a lease that ran out also sweeps (its run is interrupted now)."""
        self._run_callers.pop(token, None)
        if lease_until is None:
            raise Unauthorized("run token is not valid: its invocation is not running")
        await self.repo.expire(now_ms())
        self.changed.notify()
        raise Unauthorized("run token is not valid: its invocation's lease ran out")

    def _remember_run_caller(self, token: str, token_hash: str, caller: Caller) -> Caller:
        """Keep a token's caller; past the bound, start over (a cache miss costs one join, nothing more)."""
        if len(self._run_callers) >= RUN_CALLER_LIMIT:
            self._run_callers.clear()
        self._run_callers[token] = (token_hash, caller)
        return caller

    # keys
    async def create_key(self, env: str, role: str, name: object = None) -> tuple[StoredKey, str]:
        """A new key of ``env`` (created if needed); the secret is returned here and never again.
        InvalidRequest for an unknown role or a name past ``MAX_KEY_NAME`` (the same rule for the API,
        the console and the command line)."""
        if role not in ROLES:
            raise InvalidRequest(f"role must be one of {', '.join(ROLES)}")
        name = check_key_name(name)
        values.check_key(env, "environment")
        secret = auth.new_key_secret()
        key = StoredKey(auth.new_id("key"), env, role, name, now_ms())
        await self.repo.add_key(key, auth.hash_secret(secret))
        return key, secret

    async def create_first_admin_key(self) -> str | None:
        """An admin key of ``default`` if the store has no key yet (atomic); its secret, else None."""
        secret = auth.new_key_secret()
        key = StoredKey(auth.new_id("key"), "default", "admin", "bootstrap", now_ms())
        return secret if await self.repo.add_first_key(key, auth.hash_secret(secret)) else None

    async def issue_key(self, caller: Caller, role: object, name: object) -> tuple[StoredKey, str]:
        """An admin creates a key of its own environment."""
        require(caller, "admin")
        if not isinstance(role, str):
            raise InvalidRequest(f"role must be one of {', '.join(ROLES)}")
        return await self.create_key(caller.env, role, name)

    async def ensure_admin_key(self, secret: str, env: str = "default") -> None:
        key = StoredKey(auth.new_id("key"), env, "admin", "bootstrap", now_ms())
        await self.repo.ensure_admin_key(key, auth.hash_secret(secret))

    async def list_keys(self, caller: Caller) -> list[StoredKey]:
        require(caller, "admin")
        return await self.repo.list_keys(caller.env)

    async def revoke_key(self, caller: Caller, key_id: str) -> list[str]:
        """Revoke a key of the admin's environment and end what it holds (``end_key``)."""
        require(caller, "admin")
        return await self.end_key(caller.env, key_id)

    async def end_key(self, env: str, key_id: str) -> list[str]:
        """Revoke ``key_id`` and, in the same atomic step, end the invocations it claimed: their run tokens
        are refused from then on, by every server sharing the store (each checks a token in the store on
        every call), and their runs are interrupted. The runs' ids; NotFound for no such unrevoked key."""
        ended = await self.repo.revoke_key(env, key_id, now_ms())
        if ended is None:
            raise NotFound(f"no unrevoked key {key_id!r} in environment {env!r}")
        self.changed.notify()
        return ended

    # sessions
    async def create_session(self, caller: Caller, body: dict[str, Any]) -> tuple[StoredSession, bool]:
        require(caller, "admin", "member")
        session_id = name_field(body, "id") or auth.new_id("ses")
        metadata = body.get("metadata")
        data = metadata_data({} if metadata is None else metadata)
        user = name_field(body, "user")
        if user is not None:
            await self.act_for(caller, user)
        session = StoredSession(caller.env, session_id, caller.key_id, user, data, now_ms())
        stored, created = await self.repo.create_session(session)
        if not created and not self.may_use(caller, stored.owner):
            raise Forbidden(f"session id {session_id!r} is taken by another caller")
        return stored, created

    async def fork_session(self, caller: Caller, session_id: str, body: dict[str, Any]) -> tuple[StoredSession, bool]:
        """A new session of the caller, ``parent`` the source's id, holding a copy of the source's
        session-scope state as of one instant with the ``lists`` named cut (``Database.fork_session``);
        ``user`` defaults to the source's. The same id again, forked from the same source by the same
        caller: 200 with that session (a resend); an id taken otherwise: Forbidden."""
        require(caller, "admin", "member")
        source = await self.session(caller, session_id)
        fork_id = name_field(body, "id") or auth.new_id("ses")
        metadata = body.get("metadata")
        data = metadata_data({} if metadata is None else metadata)
        cuts = fork_cuts(body.get("lists"))
        user = name_field(body, "user") or source.user
        if user is not None:
            await self.act_for(caller, user)
        fork = StoredSession(caller.env, fork_id, caller.key_id, user, data, now_ms(), parent=source.id)
        made = await self.database.fork_session(source, fork, cuts)
        if made is None:
            raise NotFound(f"no session {session_id!r}")
        stored, created = made
        if not created and (not self.may_use(caller, stored.owner) or stored.parent != source.id):
            raise Forbidden(f"session id {fork_id!r} is taken by another session")
        return stored, created

    async def act_for(self, caller: Caller, user: str) -> None:
        """Let a member act for end user ``user`` — name it in a session, whose runs reach its user-scope
        state and memory folder — only if it is the member key that named the user first in the
        environment (``PlatformFacet.bind_user``); Forbidden otherwise. Admins act for every end user."""
        if caller.is_admin:
            return
        if await self.repo.bind_user(caller.env, user, caller.key_id) != caller.key_id:
            raise Forbidden(f"end user {user!r} belongs to another key of this environment (an admin may act for it)")

    def may_use(self, caller: Caller, owner: str) -> bool:
        return caller.is_admin or caller.key_id == owner

    async def session(self, caller: Caller, session_id: str) -> StoredSession:
        """A session the caller may use; 404 also when it exists but is someone else's."""
        found = await self.repo.get_session(caller.env, session_id)
        if found is None or not self.may_use(caller, found.owner):
            raise NotFound(f"no session {session_id!r}")
        return found

    async def writable_session(self, caller: Caller, session_id: str, agent: str) -> StoredSession:
        """``session``, for a caller's write of ``agent``'s session-scope state: the agent is recorded in
        the session first (``PlatformFacet.add_session_agent``), so the session's delete drops that
        state too. Once per session and agent in this process (``StoredSession.made`` tells a session
        made again with the same id); 404 when the session went meanwhile."""
        found = await self.session(caller, session_id)
        recorded = (found.env, found.id, found.made, agent)
        if recorded not in self._session_agents:
            if not await self.repo.add_session_agent(found, agent):
                raise NotFound(f"no session {session_id!r}")
            if len(self._session_agents) >= RECORDED_AGENTS:
                self._session_agents.clear()
            self._session_agents.add(recorded)
        return found

    async def get_session(self, caller: Caller, session_id: str) -> StoredSession:
        require(caller, "admin", "member")
        return await self.session(caller, session_id)

    async def list_sessions(
        self, caller: Caller, user: str | None, after: str | None, limit: int, desc: bool = False
    ) -> Page:
        """The caller's sessions (an admin's: all of its environment), oldest first or with ``desc``
        newest first; ``after`` is the ``next`` of the page before."""
        require(caller, "admin", "member")
        owner = None if caller.is_admin else caller.key_id
        found = await self.repo.list_sessions(caller.env, owner, user, cursor(after), limit, desc)
        return page(found, limit)

    async def session_agents(self, caller: Caller, session_id: str) -> list[str]:
        """The agents that ran in a session the caller may use: those its session-scope state is kept under."""
        require(caller, "admin", "member")
        await self.session(caller, session_id)
        return await self.repo.session_agents(caller.env, session_id)

    async def update_session(self, caller: Caller, session_id: str, body: dict[str, Any]) -> StoredSession:
        """Replace the session's metadata (owner, admin): the same checks as at its creation."""
        require(caller, "admin", "member")
        if "metadata" not in body:
            raise InvalidRequest("metadata is required: the object that replaces the session's metadata")
        data = metadata_data(body["metadata"])
        owner = None if caller.is_admin else caller.key_id
        updated = await self.repo.update_session(caller.env, session_id, owner, data)
        if updated is None:
            raise NotFound(f"no session {session_id!r}")
        return updated

    async def delete_session(self, caller: Caller, session_id: str) -> None:
        """Delete the session, cancel its held runs, and drop its session-scope state of every agent
        that ran or kept state in it: an id created again later, by anyone, starts empty."""
        found = await self.get_session(caller, session_id)
        agents = await self.database.delete_session(caller.env, session_id, now_ms())
        self._session_agents.difference_update({(found.env, found.id, found.made, agent) for agent in agents or ()})
        if agents is None:
            raise NotFound(f"no session {session_id!r}")
        self.changed.notify()  # its held runs were cancelled

    # runs
    async def start_run(self, caller: Caller, body: dict[str, Any]) -> tuple[StoredRun, bool]:
        """Queue a run and its start invocation; SessionBusy while a run of its session is active."""
        if caller.role not in ("admin", "member", "run"):
            raise Forbidden("only admin and member keys or a run token start runs")
        agent = str(name_field(body, "agent", required=True))
        session_id = name_field(body, "session_id")
        idempotency_key = name_field(body, "idempotency_key")
        data = values.encode(body.get("input"))
        values.check_size(len(data), "input")
        timeout = self._queue_timeout(body)
        user = await self._run_user(caller, session_id)
        now = now_ms()
        parent = caller.run
        run = StoredRun(
            caller.env,
            auth.new_id("run"),
            agent,
            caller.key_id,
            session_id,
            user,
            parent.run_id if parent else None,
            "queued",
            data,
            now,
            now,
            idempotency_key=idempotency_key,
            queue_timeout=timeout,
            queue_deadline=now + timeout,
        )
        invocation = StoredInvocation(
            auth.new_id("inv"), caller.env, run.id, agent, "start", "queued", now, queue_deadline=run.queue_deadline
        )
        who = f"run:{parent.run_id}" if parent else caller.key_id
        stored, created = await self.repo.start_run(run, who, invocation)
        if created:
            self.changed.notify()
        return stored, created

    def _queue_timeout(self, body: dict[str, Any]) -> int:
        """The run's ``queue_timeout`` in ms: the body's (seconds), else the server's."""
        given = body.get("queue_timeout")
        return self.queue_timeout_ms if given is None else queue_timeout_ms(given)

    async def _run_user(self, caller: Caller, session_id: str | None) -> str | None:
        session = None if session_id is None else await self.session(caller, session_id)
        if caller.run is not None:
            return caller.run.user
        return None if session is None else session.user

    async def get_run(self, caller: Caller, run_id: str, wait: float = 0.0) -> StoredRun:
        require(caller, "admin", "member")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait, MAX_RUN_WAIT_S)
        waited = False
        while True:
            event = self.changed.current()
            run = await self.visible_run(caller, run_id, expire=True)
            left = deadline - loop.time()
            if run.status not in ACTIVE or left <= 0:
                if waited:
                    await self.recheck(caller)
                return run
            await self.changed.wait(min(left, RUN_POLL_S), event)
            waited = True

    async def visible_run(self, caller: Caller, run_id: str, expire: bool = False) -> StoredRun:
        """The run, if the caller may see it. With ``expire``, a run still queued past its deadline is
        expired first (the sweep's guarded step, done now), so a reader never sees it queued."""
        run = await self.repo.get_run(caller.env, run_id)
        if run is None or not self.may_use(caller, run.owner):
            raise NotFound(f"no run {run_id!r}")
        now = now_ms()
        if expire and run.status == "queued" and run.queue_deadline is not None and run.queue_deadline < now:
            if await self.repo.expire_queued(now):
                self.changed.notify()
            run = await self.repo.get_run(caller.env, run_id) or run
        return run

    async def list_runs(self, caller: Caller, query: dict[str, Any]) -> Page:
        """The caller's runs (an admin's: all of its environment) matching ``query``'s filters
        (``session_id``, ``status``, ``agent``, ``parent_id``), oldest first or with ``desc`` newest first."""
        require(caller, "admin", "member")
        owner = None if caller.is_admin else caller.key_id
        limit = query["limit"]
        found = await self.repo.list_runs(
            RunFilter(
                caller.env,
                owner,
                query.get("session_id"),
                query.get("status"),
                cursor(query.get("after")),
                limit,
                agent=query.get("agent"),
                parent_id=query.get("parent_id"),
                desc=bool(query.get("desc")),
            )
        )
        return page(found, limit)

    async def decide(self, caller: Caller, run_id: str, body: dict[str, Any]) -> StoredRun:
        """held → queued for its resume, with ``{approved, data, by, at}`` as the decision (``by``: the
        deciding key's name, or its id; ``at``: when, in ms); never session_busy."""
        require(caller, "admin", "member")
        approved = body.get("approved")
        if not isinstance(approved, bool):
            raise InvalidRequest("approved must be true or false")
        now = now_ms()
        decision = values.encode({"approved": approved, "data": body.get("data"), "by": caller.label, "at": now})
        values.check_size(len(decision), "decision")
        run = await self.visible_run(caller, run_id)
        invocation = StoredInvocation(
            auth.new_id("inv"),
            caller.env,
            run_id,
            run.agent,
            "resume",
            "queued",
            now,
            queue_deadline=now + run.queue_timeout,
        )
        decided = await self.repo.decide(caller.env, run_id, decision, invocation, now)
        if decided is None:
            raise NotHeld(f"run {run_id!r} is not held")
        self.changed.notify()
        return decided

    async def cancel(self, caller: Caller, run_id: str) -> StoredRun:
        require(caller, "admin", "member")
        await self.visible_run(caller, run_id)
        run = await self.repo.cancel(caller.env, run_id, now_ms())
        if run is None:
            raise NotFound(f"no run {run_id!r}")
        self.changed.notify()
        return run

    # agents
    async def list_agents(self, caller: Caller) -> list[AgentStats]:
        """Every agent of the caller's environment a worker claimed for or that has runs (admin, member:
        the counts are the environment's, as a worker serves every member's runs)."""
        require(caller, "admin", "member")
        return await self.repo.agent_stats(caller.env)


def queue_timeout_ms(seconds: object) -> int:
    """A queue timeout in seconds (1 to 86,400, fractions allowed) as milliseconds; InvalidRequest otherwise."""
    low, high = QUEUE_TIMEOUT_RANGE_S
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and low <= seconds <= high:
        return round(seconds * 1000)  # NaN fails the comparison, infinity the bound
    raise InvalidRequest(f"queue_timeout must be a number of seconds from {low} to {high}")


def metadata_data(metadata: object) -> bytes:
    """A session's metadata as stored: an object, at most 1 MiB encoded."""
    if not isinstance(metadata, dict):
        raise InvalidRequest("metadata must be an object")
    data = values.encode(metadata)
    values.check_size(len(data), "metadata")
    return data


def require(caller: Caller, *roles: str) -> None:
    if caller.role not in roles:
        raise Forbidden(f"this call needs a key with role {' or '.join(roles)}, not {caller.role}")


def name_field(body: dict[str, Any], name: str, required: bool = False) -> str | None:
    """A string field in the key charset (ids, agent and user names)."""
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidRequest(f"{name} is required")
        return None
    if not values.is_key(value):
        raise InvalidRequest(f"{name} must be a string of 1-200 of A-Z a-z 0-9 . _ : -")
    return str(value)


def cursor(after: str | None) -> int:
    if after is None or after == "":
        return 0
    if not after.isdigit() or len(after) > 18:
        raise InvalidRequest("after must be the next cursor of a previous page")
    return int(after)


def page(items: list[Any], limit: int) -> Page:
    return Page(items, str(items[-1].seq) if len(items) == limit and items else None)
