"""Every route of the HTTP API: parse, call the platform, serialise. No rules live here.

The State API's routes are raw ASGI endpoints, in ``state_routes.py``; these are functions of a Request.

Errors are raised as ``KeepstateError`` and written by the one handler in ``app.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import values
from ..errors import InvalidRequest, NotFound
from ..platform.invocations import Invocations, check_agents
from ..platform.models import Caller
from ..platform.service import Platform
from ..protocol import DEFAULT_PAGE, MAX_CLAIM_WAIT_S, MAX_PAGE, MAX_RUN_WAIT_S, RUN_TOKEN_HEADER
from ..stores.records import RUN_STATUSES, StoredRun
from ..stores.remembered import Answer
from . import idempotent
from .http import (
    body_seconds,
    json_object,
    json_response,
    no_content,
    parse_body,
    query_int,
    query_name,
    query_seconds,
    read_body,
)

T = TypeVar("T")


def platform(request: Request) -> Platform:
    found: Platform = request.app.state.platform
    return found


def facet_api(request: Request, found: T | None, capability: str) -> T:
    """``found``, an API the app holds over one of the store's facets, or the store's own refusal
    (400, naming what it lacks) when it declares no such ``capability``."""
    if found is None:
        database = platform(request).database
        database.capabilities.require(capability, database.url)
    assert found is not None
    return found


async def key_caller(request: Request) -> Caller:
    return await platform(request).authenticate(request.headers.get("authorization"))


async def run_caller(request: Request) -> Caller:
    return await platform(request).authenticate_run(request.headers.get(RUN_TOKEN_HEADER))


def path(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    return value


def record_id(request: Request, name: str) -> str:
    """A session, run, key or invocation id from the path: never in the key charset → no such record."""
    value = path(request, name)
    if not values.is_key(value):
        raise NotFound(f"no such {name.removesuffix('_id').replace('inv', 'invocation')} {value[:80]!r}")
    return value


# keys
async def create_key(request: Request) -> Response:
    caller = await key_caller(request)
    body = await json_object(request)
    key, secret = await platform(request).issue_key(caller, body.get("role"), body.get("name"))
    return json_response({"id": key.id, "key": secret, "role": key.role, "name": key.name}, 201)


async def list_keys(request: Request) -> Response:
    keys = await platform(request).list_keys(await key_caller(request))
    return json_response({"keys": [key.public() for key in keys]})


async def revoke_key(request: Request) -> Response:
    await platform(request).revoke_key(await key_caller(request), record_id(request, "key_id"))
    return no_content()


# sessions
async def create_session(request: Request) -> Response:
    caller = await key_caller(request)
    session, created = await platform(request).create_session(caller, await json_object(request, optional=True))
    return json_response(session.public(), 201 if created else 200)


async def fork_session(request: Request) -> Response:
    caller = await key_caller(request)
    session_id = record_id(request, "session_id")
    body = await json_object(request, optional=True)
    session, created = await platform(request).fork_session(caller, session_id, body)
    return json_response(session.public(), 201 if created else 200)


async def get_session(request: Request) -> Response:
    session = await platform(request).get_session(await key_caller(request), record_id(request, "session_id"))
    return json_response(session.public())


async def list_sessions(request: Request) -> Response:
    caller = await key_caller(request)
    limit = query_int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
    found = await platform(request).list_sessions(
        caller, query_name(request, "user"), request.query_params.get("after"), limit
    )
    return json_response({"sessions": [s.public() for s in found.items], "next": found.next})


async def update_session(request: Request) -> Response:
    caller = await key_caller(request)
    session_id = record_id(request, "session_id")
    session = await platform(request).update_session(caller, session_id, await json_object(request))
    return json_response(session.public())


async def delete_session(request: Request) -> Response:
    await platform(request).delete_session(await key_caller(request), record_id(request, "session_id"))
    return no_content()


# runs
async def start_run(request: Request) -> Response:
    token = request.headers.get(RUN_TOKEN_HEADER)
    caller = await (run_caller(request) if token else key_caller(request))
    body = await read_body(request)
    fields = await parse_body(body)
    scope = idempotent.token_caller(token) or idempotent.key_caller(caller)

    def started(answer: tuple[StoredRun, bool]) -> Answer:
        run, created = answer
        return idempotent.json_answer(run.public(), 202 if created else 200)

    return await once(request, scope, body, lambda: platform(request).start_run(caller, fields), started)


async def get_run(request: Request) -> Response:
    caller = await key_caller(request)
    wait = query_seconds(request, "wait", MAX_RUN_WAIT_S)
    run = await platform(request).get_run(caller, record_id(request, "run_id"), wait)
    return json_response(run.public())


async def list_runs(request: Request) -> Response:
    caller = await key_caller(request)
    status = request.query_params.get("status") or None
    if status is not None and status not in RUN_STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(RUN_STATUSES)}")
    query = {
        "session_id": query_name(request, "session_id"),
        "status": status,
        "after": request.query_params.get("after"),
        "limit": query_int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE),
    }
    found = await platform(request).list_runs(caller, query)
    return json_response({"runs": [r.public() for r in found.items], "next": found.next})


async def decide_run(request: Request) -> Response:
    caller = await key_caller(request)
    run_id = record_id(request, "run_id")
    body = await read_body(request)
    fields = await parse_body(body)
    work = partial(platform(request).decide, caller, run_id, fields)
    return await once(request, idempotent.key_caller(caller), body, work, _run_answer)


async def cancel_run(request: Request) -> Response:
    caller = await key_caller(request)
    run_id = record_id(request, "run_id")
    body = await read_body(request)
    await parse_body(body, optional=True)
    work = partial(platform(request).cancel, caller, run_id)
    return await once(request, idempotent.key_caller(caller), body, work, _run_answer)


def _run_answer(run: StoredRun | None) -> Answer | None:
    return None if run is None else idempotent.json_answer(run.public())


async def once(
    request: Request,
    caller: str | None,
    body: bytes,
    work: Callable[[], Awaitable[T]],
    render: idempotent.Render,
    one_write: bool = False,
) -> Response:
    """A write route's response, once per ``Idempotency-Key`` (``idempotent.py``; ``caller``: whose keys,
    needed only with one; ``one_write``: ``Memo.one_write``). A keyed write may commit only as its
    remembered step ends (PostgreSQL): the wake-up it gave this server's waiters (claims, run waits, event
    streams) came too early for them to see it, so they are woken again now."""
    response = await idempotent.respond_once(request, platform(request).repo, caller, body, work, render, one_write)
    if idempotent.HEADER in request.headers:
        platform(request).changed.notify()
    return response


# agents
async def list_agents(request: Request) -> Response:
    agents = await platform(request).list_agents(await key_caller(request))
    return json_response({"agents": [agent.public() for agent in agents]})


# invocations
def invocations(request: Request) -> Invocations:
    found: Invocations = request.app.state.invocations
    return found


async def claim(request: Request) -> Response:
    caller = await key_caller(request)
    body = await json_object(request)
    agents = check_agents(body.get("agents"))
    wait = body_seconds(body, "wait", MAX_CLAIM_WAIT_S)
    claimed = await invocations(request).claim(caller, agents, wait)
    return no_content() if claimed is None else json_response(claimed.public())


async def heartbeat(request: Request) -> Response:
    token, inv_id = await invocation_token(request)
    await json_object(request, optional=True)
    return json_response(await invocations(request).heartbeat(token, inv_id))


def finisher(kind: str) -> Endpoint:
    async def finish(request: Request) -> Response:
        def work(token: str, inv_id: str, fields: dict[str, Any]) -> Awaitable[StoredRun]:
            return invocations(request).finish(token, inv_id, kind, fields)

        return await invocation_write(request, work, _finished, optional=kind != "fail")

    return finish


async def invocation_write(
    request: Request,
    work: Callable[[str, str, dict[str, Any]], Awaitable[T]],
    render: idempotent.Render,
    optional: bool = False,
    one_write: bool = False,
) -> Response:
    """An invocation's write (complete/fail/hold, events): ``work(token, invocation id, body fields)``. With
    an ``Idempotency-Key`` its repeat is answered before the token is checked, which a finished invocation's
    token no longer passes; then the token is checked before the body is read, as for every invocation call."""
    keyed = idempotent.HEADER in request.headers
    caller = idempotent.token_caller(request.headers.get(RUN_TOKEN_HEADER)) if keyed else None
    replayed = await idempotent.replayed_early(request, platform(request).repo, caller, render)
    if replayed is not None:
        return replayed
    token, inv_id = await invocation_token(request)
    body = await read_body(request)
    fields = await parse_body(body, optional)
    return await once(request, caller, body, partial(work, token, inv_id, fields), render, one_write)


def _finished(run: StoredRun | None) -> Answer | None:
    return None if run is None else idempotent.json_answer({"ok": True, "run_id": run.id, "status": run.status})


async def invocation_token(request: Request) -> tuple[str, str]:
    """The run token of an invocation call, checked before its body is read (401 whatever the body)."""
    token, inv_id = request.headers.get(RUN_TOKEN_HEADER), path(request, "inv_id")
    await invocations(request).authorize(token, inv_id)
    assert token is not None
    return token, inv_id


Endpoint = Callable[[Request], Awaitable[Response]]


def resource(route_path: str, **endpoints: Endpoint) -> Route:
    """One route per path, dispatching on the method, so a 405 lists every method the path has."""

    async def dispatch(request: Request) -> Response:
        return await endpoints["GET" if request.method == "HEAD" else request.method](request)

    return Route(route_path, dispatch, methods=list(endpoints), name=route_path)


ROUTES = [
    resource("/v0/keys", POST=create_key, GET=list_keys),
    resource("/v0/keys/{key_id}", DELETE=revoke_key),
    resource("/v0/sessions", POST=create_session, GET=list_sessions),
    resource("/v0/sessions/{session_id}", GET=get_session, PATCH=update_session, DELETE=delete_session),
    resource("/v0/sessions/{session_id}/fork", POST=fork_session),
    resource("/v0/runs", POST=start_run, GET=list_runs),
    resource("/v0/runs/{run_id}", GET=get_run),
    resource("/v0/runs/{run_id}/decision", POST=decide_run),
    resource("/v0/runs/{run_id}/cancel", POST=cancel_run),
    resource("/v0/agents", GET=list_agents),
    resource("/v0/invocations/claim", POST=claim),
    resource("/v0/invocations/{inv_id}/heartbeat", POST=heartbeat),
    resource("/v0/invocations/{inv_id}/complete", POST=finisher("complete")),
    resource("/v0/invocations/{inv_id}/fail", POST=finisher("fail")),
    resource("/v0/invocations/{inv_id}/hold", POST=finisher("hold")),
]
