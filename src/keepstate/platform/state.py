"""The State API's rules: whose namespace a request addresses, and each call over the state facet.

A request names its state in one of five ways (``Address``): a run token and a scope
(``/v0/state/{scope}/…``, the seed's API), or a caller's key and a prefix — a session's state of one
agent, a run's, an agent's, an end user's of one agent ("State for callers"). ``StateApi.namespace``
turns an address into a namespace with the rules of the rest of the API (404 for a session or run the
caller may not see, 403 for a member on the agent and user prefixes); the calls then act on that
namespace alike, with the same bodies and answers whoever asked.

Namespaces come from ``keepstate.scope.scope_namespace`` (the same function the embedded store and
``keepstate.testing`` use), so an agent finds the same state whether it runs embedded or behind this
server. Keys, values and sizes are ``keepstate.values``', arguments' bounds ``keepstate.protocol``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .. import protocol, values, writes
from ..errors import InvalidRequest, KeepstateError, NoSession, NotFound, NoUser, VersionConflict
from ..scope import check_if_version, scope_namespace
from ..stores.base import StateFacet
from ..stores.records import SCOPE_KINDS, BatchOp, Entry, ListPage, RunContext
from .models import Caller
from .service import Platform, lease_alive, require, require_run_token

NAMESPACE_CACHE = 4096


@dataclass(frozen=True, slots=True)
class Address:
    """Where a state request points: ``kind`` is ``token`` (a run token and a scope) or a caller prefix
    (``session``, ``run``, ``agent``, ``user``) with its path parameters."""

    kind: str
    scope: str = ""
    id: str = ""
    agent: str = ""


def namespace(ctx: RunContext, kind: str) -> str:
    """The namespace of ``kind`` for the token's run: NoSession / NoUser when it has none."""
    scope_id: str | None
    if kind == "run":
        scope_id = ctx.run_id
    elif kind == "session":
        scope_id = ctx.session_id
        if scope_id is None:
            raise NoSession("this run has no session: the session scope needs one")
    elif kind == "user":
        scope_id = ctx.user
        if scope_id is None:
            raise NoUser("this run has no end user: the user scope needs one")
    elif kind == "agent":
        scope_id = None
    else:
        raise InvalidRequest(f"unknown scope {kind!r}: use one of {', '.join(SCOPE_KINDS)}")
    return _scope_namespace(kind, ctx.agent, scope_id, ctx.env)


@lru_cache(maxsize=NAMESPACE_CACHE)
def _scope_namespace(kind: str, agent: str, scope_id: str | None, env: str) -> str:
    """``scope_namespace`` remembered: a pure function of four strings, asked on every state call
    with the same few arguments (its checks are a few regular expressions; the lookup is one hash)."""
    return scope_namespace(kind, agent, scope_id, env)


def _found(entry: Entry | None, key: str) -> Entry:
    if entry is None:
        raise absent(key)
    return entry


def absent(key: str, what: str = "no value at") -> NotFound:
    """404 for a key that is absent (``key`` in the details): a client tells it from a 404 for a session
    or run it may not see, which names no key."""
    return NotFound(f"{what} {key!r}", key=key)


def _field(body: dict[str, Any], name: str) -> Any:
    if name not in body:
        raise InvalidRequest(f"{name} is required")
    return body[name]


def write_fields(op: str, body: dict[str, Any]) -> dict[str, Any]:
    """A write's body fields, checked, in the form ``writes.batch_op`` takes (one rule for single
    calls and batch ops)."""
    fields: dict[str, Any] = {
        "if_version": check_if_version(body.get("if_version")),
        "ttl_ms": protocol.ttl_ms(body.get("ttl_seconds")),
    }
    if op == "put":
        fields["value"] = _field(body, "value")
    elif op == "append":
        items = _field(body, "items")
        if not isinstance(items, list):
            raise InvalidRequest("items must be a list")
        fields["items"] = items
    elif op == "incr":
        fields["by"] = protocol.check_by(body.get("by", 1))
    elif op == "patch":
        fields["patch"] = _field(body, "patch")
    elif op == "trim":
        fields["keep_last"] = protocol.check_keep_last(_field(body, "keep_last"))
    return fields


class StateApi:
    def __init__(self, backend: StateFacet) -> None:
        self.backend = backend

    # -- whose state ---------------------------------------------------------------------------

    async def namespace(self, platform: Platform, caller: Caller, address: Address, writes: bool = False) -> str:
        """The namespace ``address`` names for ``caller``, by the API's visibility rules. ``writes``: a
        caller's write of a session's state records its agent in the session (``writable_session``)."""
        if address.kind == "token":
            assert caller.run is not None
            return namespace(caller.run, address.scope)
        require(caller, "admin", "member")
        if address.kind == "session":
            if writes:
                await platform.writable_session(caller, address.id, address.agent)
            else:
                await platform.session(caller, address.id)
            return scope_namespace("session", address.agent, address.id, caller.env)
        if address.kind == "run":
            run = await platform.visible_run(caller, address.id)
            return scope_namespace("run", run.agent, run.id, caller.env)
        require(caller, "admin")
        if address.kind == "agent":
            return scope_namespace("agent", address.agent, None, caller.env)
        return scope_namespace("user", address.agent, address.id, caller.env)

    # -- reads ---------------------------------------------------------------------------------

    async def get(self, ns: str, key: str) -> Entry:
        return _found(await self.backend.get(ns, values.check_key(key)), key)

    async def get_as(self, platform: Platform, token: str | None, kind: str, key: str) -> Entry:
        """The server's hot read, a run token's GET: ``authenticate_run`` then ``get``, except that once
        the token's caller is known, its validity and the value come from one store read
        (``Database.read_with_lease``: one statement on SQLite and PostgreSQL), a store read or round
        trip fewer per GET. A dead token still answers 401 before anything else."""
        token = require_run_token(token)
        token_hash, caller = platform.known_run_caller(token)
        if caller is None:
            caller = await platform.authenticate_run(token)
            assert caller.run is not None
            return await self.get(namespace(caller.run, kind), key)
        assert caller.run is not None
        try:
            ns = namespace(caller.run, kind)
            values.check_key(key)
        except KeepstateError:
            await platform.authenticate_run(token)
            raise
        lease_until, entry = await platform.database.read_with_lease(token_hash, ns, key)
        if not lease_alive(lease_until):
            await platform.reject_run_token(token, token_hash, lease_until)
        return _found(entry, key)

    async def read_list(self, ns: str, key: str, tail: int | None, start: int | None, limit: int | None) -> ListPage:
        """``?tail=N`` or ``?start=S&limit=L`` of a list; 404 when absent."""
        values.check_key(key)
        if tail is not None:
            page = await self.backend.tail(ns, key, protocol.check_tail(tail))
        else:
            begin, count = protocol.check_range(start or 0, protocol.DEFAULT_PAGE if limit is None else limit)
            page = await self.backend.items(ns, key, begin, count)
        if page is None:
            raise absent(key)
        return page

    async def keys(self, ns: str, prefix: str, after: str, limit: int) -> tuple[list[tuple[str, int]], str | None]:
        values.check_key_prefix(prefix)
        values.check_key_prefix(after, "after")
        found = await self.backend.keys(ns, prefix, after, limit)
        return found, (found[-1][0] if len(found) == limit else None)

    # -- writes --------------------------------------------------------------------------------

    async def write(self, ns: str, kind: str, key: str, body: dict[str, Any]) -> Any:
        """One write of the State API (``kind``: put, delete, append, trim, pop, incr, patch), its body checked
        as a batch op's is (``write_fields``), through the facet's one door: the facet's answer. A ``pop`` with
        nothing to pop is 404."""
        op = writes.op_of(kind, values.check_key(key), write_fields(kind, body))
        answer = await self.backend.write(writes.lone_op(op, ns))
        if answer is None and kind == "pop":
            raise absent(key, "no item to pop (absent or empty) at")
        return answer

    def plan_batch(self, ctx: RunContext, body: dict[str, Any]) -> list[BatchOp]:
        """``POST /v0/state/batch``'s ops, checked, in the namespaces of one invocation's scopes."""
        ops = body.get("ops")
        if not isinstance(ops, list):
            raise InvalidRequest("ops must be a list")
        writes.check_batch_size(ops)
        return [_batch_op(ctx, index, op) for index, op in enumerate(ops)]

    async def batch(self, planned: list[BatchOp]) -> list[Any]:
        """The planned ops, all or none: the facet's answer to each."""
        try:
            return await self.backend.batch(planned)
        except VersionConflict as error:
            raise writes.scoped_conflicts(error) from None


def _batch_op(ctx: RunContext, index: int, op: object) -> Any:
    try:
        if not isinstance(op, dict):
            raise InvalidRequest("each op is an object {op, scope, key, ...}")
        kind, scope, key = op.get("op"), op.get("scope"), op.get("key")
        if not isinstance(kind, str) or not isinstance(scope, str):
            raise InvalidRequest("each op names its op and scope")
        ns = namespace(ctx, scope)
        return writes.batch_op(writes.op_of(kind, values.check_key(key), write_fields(kind, op)), ns)
    except KeepstateError as error:
        raise type(error)(error.message, **{**error.details, "index": index}) from None
