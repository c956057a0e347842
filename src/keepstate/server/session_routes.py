"""The session-store routes: ``/v0/session-stores/{space}/sessions/{id}`` and its lease calls.

Parse, call ``SessionStores`` (``platform/session_stores.py``, where the rules are), serialise, as in
``routes.py``. Each handler checks the key before it reads a body. ``state`` travels as the stored
canonical JSON, embedded in the answer without being parsed again.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..platform.models import Caller
from ..platform.session_stores import SessionStores
from .http import JSON, json_object, json_response, no_content
from .routes import facet_api, key_caller, path, resource


def session_stores(request: Request) -> SessionStores:
    found: SessionStores | None = request.app.state.session_stores
    return facet_api(request, found, "leases")


async def coordinates(request: Request) -> tuple[Caller, str, str]:
    """Who calls, the space and the session id: the credential first, before any body is read."""
    return await key_caller(request), path(request, "space"), path(request, "id")


async def read(request: Request) -> Response:
    found = await session_stores(request).get(*await coordinates(request))
    body = {"state": orjson.Fragment(found.data), "version": found.version, "expires_at": found.expires_at}
    return Response(orjson.dumps(body), media_type=JSON)


async def write(request: Request) -> Response:
    where = await coordinates(request)
    version = await session_stores(request).put(*where, await json_object(request))
    return json_response({"version": version})


async def delete(request: Request) -> Response:
    where = await coordinates(request)
    await session_stores(request).delete(*where, request.query_params.get("fence"))
    return no_content()


async def touch(request: Request) -> Response:
    where = await coordinates(request)
    await session_stores(request).touch(*where, await json_object(request))
    return json_response({})


async def lease(request: Request) -> Response:
    where = await coordinates(request)
    granted = await session_stores(request).lease(*where, await json_object(request))
    return json_response({"fence": granted.fence, "expires_at": granted.expires_at})


async def renew(request: Request) -> Response:
    where = await coordinates(request)
    expires_at = await session_stores(request).renew(*where, await json_object(request))
    return json_response({"expires_at": expires_at})


async def release(request: Request) -> Response:
    where = await coordinates(request)
    await session_stores(request).release(*where, await json_object(request))
    return no_content()


PREFIX = "/v0/session-stores/{space}/sessions/{id}"
SESSION_STORE_ROUTES = [
    resource(PREFIX, GET=read, PUT=write, DELETE=delete),
    resource(f"{PREFIX}/touch", POST=touch),
    resource(f"{PREFIX}/lease", POST=lease),
    resource(f"{PREFIX}/lease/renew", POST=renew),
    resource(f"{PREFIX}/lease/release", POST=release),
]
