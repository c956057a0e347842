"""Memory's routes: the same five calls under three prefixes, each with its own credential and view.

- ``/v0/memory`` with a run token: the token's agent's memory, as its run's end user;
- ``/v0/agents/{agent}/memory`` with an admin key: every folder of the agent's memory;
- ``/v0/users/{user}/memory/{agent}`` with an admin key: that memory as end user ``user`` sees it.

Under each: ``GET {prefix}`` lists (``?prefix=&after=&limit=``), ``POST {prefix}/search`` searches,
and ``GET``/``PUT``/``DELETE {prefix}/{path}`` read, write and delete a document. The path is the
rest of the URL, percent-decoded once (by the server, as for every route) and judged whole by
``keepstate.platform.memory``. Every handler checks the credential and builds the view first, and
only then reads a body. Rules stay in ``MemoryApi``; here is parsing and serialising, as in ``routes.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..embedders import Embedder
from ..errors import InvalidRequest
from ..memory_rules import View
from ..platform.memory import MemoryApi, admin_view, run_view
from ..protocol import DEFAULT_PAGE, MAX_PAGE, RUN_TOKEN_HEADER
from ..scope import check_if_version
from ..semantic import describe
from ..stores.base import Database
from ..stores.documents import StoredDocument
from .http import JSON, json_object, json_response, no_content, query_int
from .routes import Endpoint, facet_api, path, platform, resource

Viewer = Callable[[Request], Awaitable[View]]


def memory_api(request: Request) -> MemoryApi:
    found: MemoryApi | None = request.app.state.memory_api
    return facet_api(request, found, "documents")


async def open_memory_api(database: Database, embedder: Embedder | None = None) -> MemoryApi | None:
    """The server's ``MemoryApi`` over the store's documents, None when the store declares none."""
    return MemoryApi(await database.documents(), embedder) if database.capabilities.documents else None


def query_version(request: Request) -> int | None:
    """A DELETE's ``?if_version=N``: absent or empty is None."""
    text = request.query_params.get("if_version")
    if text is None or text == "":
        return None
    if not text.isdigit() or len(text) > 18:
        raise InvalidRequest("if_version must be a non-negative integer")
    return check_if_version(int(text))


async def as_run(request: Request) -> View:
    return run_view(await platform(request).authenticate_run(request.headers.get(RUN_TOKEN_HEADER)))


async def as_agent_admin(request: Request) -> View:
    caller = await platform(request).authenticate(request.headers.get("authorization"))
    return admin_view(caller, path(request, "agent"))


async def as_user_admin(request: Request) -> View:
    caller = await platform(request).authenticate(request.headers.get("authorization"))
    return admin_view(caller, path(request, "agent"), path(request, "user"))


def document_body(found: StoredDocument) -> bytes:
    return orjson.dumps(
        {
            "path": found.path,
            "text": found.text,
            "metadata": orjson.Fragment(found.metadata),
            "version": found.version,
            "updated_at": found.updated_at,
        }
    )


def endpoints(viewer: Viewer) -> dict[str, Endpoint]:
    """The handlers of one prefix, each authenticating through ``viewer`` before anything else."""

    async def read(request: Request) -> Response:
        view = await viewer(request)
        if not path(request, "path"):
            return await listing(request, view)
        found = await memory_api(request).read(view, path(request, "path"))
        return Response(document_body(found), media_type=JSON)

    async def write(request: Request) -> Response:
        view = await viewer(request)
        version = await memory_api(request).write(view, path(request, "path"), await json_object(request))
        return json_response({"version": version})

    async def delete(request: Request) -> Response:
        view = await viewer(request)
        await memory_api(request).delete(view, path(request, "path"), query_version(request))
        return no_content()

    async def listed(request: Request) -> Response:
        return await listing(request, await viewer(request))

    async def search(request: Request) -> Response:
        view = await viewer(request)
        hits = await memory_api(request).search(view, await json_object(request))
        return json_response({"hits": describe(hits)})

    return {"read": read, "write": write, "delete": delete, "list": listed, "search": search}


async def listing(request: Request, view: View) -> Response:
    params = request.query_params
    limit = query_int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
    heads, after = await memory_api(request).listing(view, params.get("prefix", ""), params.get("after", ""), limit)
    documents = [{"path": h.path, "version": h.version, "updated_at": h.updated_at} for h in heads]
    return json_response({"documents": documents, "next": after})


def prefix_routes(prefix: str, viewer: Viewer) -> list[Route]:
    handlers = endpoints(viewer)
    return [
        resource(prefix, GET=handlers["list"]),
        resource(f"{prefix}/search", POST=handlers["search"]),
        resource(f"{prefix}/{{path:path}}", GET=handlers["read"], PUT=handlers["write"], DELETE=handlers["delete"]),
    ]


MEMORY_ROUTES = [
    *prefix_routes("/v0/memory", as_run),
    *prefix_routes("/v0/agents/{agent}/memory", as_agent_admin),
    *prefix_routes("/v0/users/{user}/memory/{agent}", as_user_admin),
]
