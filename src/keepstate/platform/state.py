"""The State API as a run token sees it: four scopes of the token's run, on the state facet.

The namespace of each scope comes from ``keepstate.scope.scope_namespace`` (the same function the
embedded store and ``keepstate.testing`` use), so an agent finds the same state whether it runs
embedded or behind this server. Validation (keys, values, sizes) is ``keepstate.values``'.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .. import values
from ..errors import InvalidKey, InvalidRequest, KeepstateError, NoSession, NotFound, NoUser
from ..scope import check_if_version, scope_namespace
from ..stores.base import StateFacet
from ..stores.records import SCOPE_KINDS, Entry, RunContext
from .service import Platform, lease_alive, require_run_token

NAMESPACE_CACHE = 4096


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


def _found(entry: Entry | None, kind: str, key: str) -> Entry:
    if entry is None:
        raise NotFound(f"no value at {kind}/{key}")
    return entry


class StateApi:
    def __init__(self, backend: StateFacet) -> None:
        self.backend = backend

    async def get(self, ctx: RunContext, kind: str, key: str) -> Entry:
        ns = namespace(ctx, kind)
        return _found(await self.backend.get(ns, values.check_key(key)), kind, key)

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
            return await self.get(caller.run, kind, key)
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
        return _found(entry, kind, key)

    async def put(self, ctx: RunContext, kind: str, key: str, body: dict[str, Any]) -> int:
        ns = namespace(ctx, kind)
        values.check_key(key)
        if "value" not in body:
            raise InvalidRequest("value is required")
        if_version = check_if_version(body.get("if_version"))
        data = values.encode(body["value"])
        values.check_size(len(data))
        return await self.backend.put(ns, key, data, if_version)

    async def delete(self, ctx: RunContext, kind: str, key: str, if_version: int | None) -> None:
        ns = namespace(ctx, kind)
        await self.backend.delete(ns, values.check_key(key), if_version)

    async def append(self, ctx: RunContext, kind: str, key: str, body: dict[str, Any]) -> tuple[int, int]:
        ns = namespace(ctx, kind)
        values.check_key(key)
        items = body.get("items")
        if not isinstance(items, list):
            raise InvalidRequest("items must be a list")
        encoded = values.encode_items(items)
        return await self.backend.append(ns, key, encoded)

    async def keys(
        self, ctx: RunContext, kind: str, prefix: str, after: str, limit: int
    ) -> tuple[list[tuple[str, int]], str | None]:
        ns = namespace(ctx, kind)
        for name, text in (("prefix", prefix), ("after", after)):
            if text and not values.is_key(text):
                raise InvalidKey(f"{name} must be empty or 1-200 of A-Z a-z 0-9 . _ : -")
        found = await self.backend.keys(ns, prefix, after, limit)
        return found, (found[-1][0] if len(found) == limit else None)
