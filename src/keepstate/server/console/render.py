"""Turning a page's data into an HTTP answer: templates, the console's headers, its error pages.

Jinja2 renders every template with autoescaping on (``autoescape=True``, not chosen by file name),
and no template marks anything ``safe``: every value a page prints is escaped, whatever the store
holds. Undefined names fail loudly (``StrictUndefined``) instead of printing nothing.

Every answer of the console carries the same headers (``SECURITY_HEADERS``): a Content-Security-Policy
that allows only the console's own script, style and images and no inline code (there is none),
no framing, no MIME sniffing, and no caching of pages that show private data. The static files
(style, script, icon) are served from the package with a content hash in their URL, so they can be
cached for good.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
import orjson
from starlette.responses import Response

from ...errors import KeepstateError, Unavailable
from . import links, views

ROOT = "/console"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
PRIVATE = {**SECURITY_HEADERS, "Cache-Control": "no-store"}
TITLES = {
    400: "Bad request",
    401: "Signed out",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Too large",
    503: "Unavailable",
}

ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("keepstate.server.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENVIRONMENT.filters["when"] = views.when
ENVIRONMENT.filters["iso"] = views.iso
ENVIRONMENT.filters["size"] = views.size
ENVIRONMENT.filters["snippet_parts"] = views.snippet_parts
ENVIRONMENT.filters["segment"] = links.segment
ENVIRONMENT.filters["path"] = links.path
ENVIRONMENT.globals["ago"] = views.ago


def href(*parts: str, **query: str | None) -> str:
    """A console link: ``ROOT``, each of ``parts`` as one path segment (``links.segment``: quoted whole,
    ``/`` included, so an id never splits the path, and a segment of dots alone escaped once more), then
    the query's fields that hold something. Every link the pages build goes through here (the ``href``
    of the templates)."""
    path = ROOT + "".join("/" + links.segment(part) for part in parts)
    fields = {name: value for name, value in query.items() if value not in (None, "")}
    return f"{path}?{urlencode(fields)}" if fields else path


ENVIRONMENT.globals["href"] = href


@dataclass(frozen=True, slots=True)
class Static:
    """One file the pages load: its bytes, type and the versioned path they name it by."""

    body: bytes
    media_type: str
    path: str


def _static(name: str, media_type: str) -> Static:
    body = resources.files(__package__).joinpath("static", name).read_bytes()
    return Static(body, media_type, f"{ROOT}/static/{hashlib.sha256(body).hexdigest()[:12]}/{name}")


STATIC = {
    name: _static(name, kind)
    for name, kind in (
        ("console.css", "text/css; charset=utf-8"),
        ("console.js", "text/javascript; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    )
}
ENVIRONMENT.globals.update(
    root=ROOT, css=STATIC["console.css"].path, js=STATIC["console.js"].path, icon=STATIC["favicon.svg"].path
)


def page(template: str, http_status: int = 200, headers: dict[str, str] | None = None, **context: Any) -> Response:
    """A rendered page with the console's headers."""
    body = ENVIRONMENT.get_template(template).render(**context)
    return Response(body, http_status, {**PRIVATE, **(headers or {})}, media_type="text/html; charset=utf-8")


def redirect(path: str, headers: dict[str, str] | None = None) -> Response:
    """303 See Other to a console path (after a form, or to the sign-in page)."""
    return Response(status_code=303, headers={**PRIVATE, "Location": path, **(headers or {})})


def json(content: Any, status: int = 200) -> Response:
    """A JSON answer of the console (its status poll), with the console's headers."""
    return Response(orjson.dumps(content), status, PRIVATE, media_type="application/json")


def static(name: str) -> Response:
    found = STATIC[name]
    headers = {**SECURITY_HEADERS, "Cache-Control": "public, max-age=31536000, immutable"}
    return Response(found.body, 200, headers, media_type=found.media_type)


def error_page(error: KeepstateError, signed: Any = None) -> Response:
    """A KeepstateError as a page: its status, a title for it and its message."""
    headers = {"Retry-After": str(error.retry_after)} if isinstance(error, Unavailable) else None
    if error.status == 405:
        headers = {"Allow": error.details.get("allow", "")}
    title = TITLES.get(error.status, "Error")
    return page("error.html", error.status, headers, signed=signed, title=title, message=error.message, code=error.code)
