"""The web console at ``/console/``: pages for the people around the agents (``docs/console.md``).

Server-rendered HTML (Jinja2 templates, ``render.py``) over the same ``Platform`` the HTTP API uses,
with one small script for live status updates: no Node.js, no build step, nothing to install beyond
the Python package. These are its routes; ``auth.py`` signs browsers in and checks forms,
``pages.py`` (runs, agents, keys), ``state_pages.py`` (a session and its conversations, the
agent and user scopes), ``waiting.py`` (held runs) and ``memory_pages.py`` read and render one page
per function, ``conversations.py`` recognises what framework adapters write, and ``views.py`` turns
records into what the templates show. Links are built by ``render.href``.

Each path is one route that answers every method (so a wrong method gets the console's own 405
page, not the API's JSON), and every answer is written by ``render`` with the console's security
headers. A page's ``KeepstateError`` becomes an error page with its status; a browser that is not
signed in (or whose key was revoked) is sent to the sign-in page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...errors import KeepstateError, NotFound, Unauthorized
from ..errors import MethodNotAllowed
from . import auth, context, links, memory_pages, pages, render, run_events, state_pages, waiting
from .auth import SignedIn

Page = Callable[[Request, SignedIn], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def signed(handler: Page) -> Endpoint:
    """A page for signed-in browsers: others go to the sign-in page; errors become error pages."""

    async def endpoint(request: Request) -> Response:
        platform = context.platform_of(request)
        try:
            who = await auth.signed_in(platform, request)
        except Unauthorized:
            return render.redirect(f"{render.ROOT}/")
        except KeepstateError as error:
            return render.error_page(error)
        try:
            return await handler(request, who)
        except Unauthorized:
            return render.redirect(f"{render.ROOT}/")
        except KeepstateError as error:
            return render.error_page(error, who)

    return endpoint


def polled(handler: Page) -> Endpoint:
    """A JSON endpoint for the page's script: errors in the API's JSON shape, never a redirect."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request, await auth.signed_in(context.platform_of(request), request))
        except KeepstateError as error:
            return render.json(error.to_dict(), error.status)

    return endpoint


def public(handler: Endpoint) -> Endpoint:
    """A page that needs no sign-in (the sign-in page itself, static files)."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except KeepstateError as error:
            return render.error_page(error, await auth.optional_sign_in(context.platform_of(request), request))

    return endpoint


def route(path: str, **handlers: Endpoint) -> Route:
    """One route per path for every method; a method the path lacks is the console's 405 page."""
    allow = ", ".join(sorted({*handlers, *(["HEAD"] if "GET" in handlers else [])}))

    async def dispatch(request: Request) -> Response:
        request.scope["path_params"] = {name: links.read_path(value) for name, value in request.path_params.items()}
        handler = handlers.get("GET" if request.method == "HEAD" else request.method)
        if handler is None:
            return render.error_page(MethodNotAllowed(allow))
        return await handler(request)

    return Route(f"{render.ROOT}{path}", dispatch, methods=METHODS, name=f"console:{path}")


# ---------------------------------------------------------------- sign-in


async def index(request: Request) -> Response:
    """``/console/``: the sign-in form, or the Sessions page for a signed-in browser."""
    if await auth.optional_sign_in(context.platform_of(request), request) is not None:
        return render.redirect(f"{render.ROOT}/sessions")
    return sign_in_form(request)


def sign_in_form(request: Request, error: str | None = None, status: int = 200) -> Response:
    """The sign-in page, with a fresh anti-forgery value in its form and in a short-lived cookie."""
    value = auth.new_token()
    cookie = auth.cookie(auth.FORM_COOKIE, value, auth.FORM_TTL_S, auth.is_https(request))
    return render.page(
        "signin.html", status, {"Set-Cookie": cookie}, signed=None, title="Sign in", form=value, error=error
    )


async def sign_in(request: Request) -> Response:
    fields = await auth.read_form(request)
    auth.check_token(fields.get("form", ""), request.cookies.get(auth.FORM_COOKIE, ""))
    try:
        token = await auth.sign_in(context.platform_of(request), fields.get("key", "").strip())
    except Unauthorized:
        return sign_in_form(request, "That API key is not valid: it is unknown or was revoked.", 401)
    response = render.redirect(f"{render.ROOT}/sessions", {"Set-Cookie": auth.session_cookie(token, request)})
    response.headers.append("Set-Cookie", auth.cleared(auth.FORM_COOKIE, request))
    return response


async def sign_out(request: Request, who: SignedIn) -> Response:
    await auth.signed_form(request, who)
    await auth.sign_out(context.platform_of(request), who)
    return render.redirect(f"{render.ROOT}/", {"Set-Cookie": auth.cleared(auth.COOKIE, request)})


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    found = render.STATIC.get(name)
    if found is None or found.path != request.url.path:
        raise NotFound(f"no file {name[:80]!r}")
    return render.static(name)


async def unknown(request: Request) -> Response:
    raise NotFound("no such page of the console")


async def to_index(request: Request) -> Response:
    return render.redirect(f"{render.ROOT}/")


async def server_root(request: Request) -> Response:
    """``/`` of the server: a browser (asking for HTML) is led to the console; an API client gets the
    API's JSON 404, as for any path that names nothing."""
    if request.method in ("GET", "HEAD") and "text/html" in request.headers.get("accept", ""):
        return render.redirect(f"{render.ROOT}/")
    raise NotFound("no such route")


async def favicon(request: Request) -> Response:
    """``/favicon.ico``, which browsers ask for on any page of the server: the console's icon."""
    return render.static("favicon.svg")


def console_routes() -> list[Route]:
    """The console's routes, with their full paths under ``/console``, and the server's ``/`` and
    ``/favicon.ico`` that lead browsers to it."""
    return [
        Route("/", server_root, methods=METHODS, name="console:server-root"),
        Route("/favicon.ico", favicon, methods=["GET"], name="console:favicon"),
        route("", GET=to_index),
        route("/", GET=public(index)),
        route("/sign-in", POST=public(sign_in), GET=to_index),
        route("/sign-out", POST=signed(sign_out)),
        route("/sessions", GET=signed(pages.sessions)),
        route("/sessions/{session_id}", GET=signed(state_pages.session)),
        route("/sessions/{session_id}/fork", POST=signed(pages.fork_session)),
        route("/runs", GET=signed(pages.runs)),
        route("/runs/status", GET=polled(pages.run_statuses)),
        route("/runs/{run_id}", GET=signed(pages.run)),
        route("/runs/{run_id}/events", GET=polled(run_events.stream)),
        route("/runs/{run_id}/decision", POST=signed(pages.decide)),
        route("/runs/{run_id}/cancel", POST=signed(pages.cancel)),
        route("/waiting", GET=signed(waiting.page)),
        route("/agents", GET=signed(pages.agents)),
        route("/agents/{agent}/state", GET=signed(state_pages.scope_state)),
        route("/agents/{agent}/memory", GET=signed(memory_pages.memory)),
        route("/agents/{agent}/memory/{path:path}", GET=signed(memory_pages.document)),
        route("/keys", GET=signed(pages.keys), POST=signed(pages.create_key)),
        route("/keys/{key_id}/revoke", POST=signed(pages.revoke_key)),
        route("/static/{version}/{name}", GET=public(static)),
        route("/{rest:path}", **dict.fromkeys(METHODS, public(unknown))),
    ]


__all__ = ["console_routes"]
