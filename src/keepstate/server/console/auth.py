"""Signing in to the console, and the checks every form goes through.

**Sign-in.** A person pastes an API key once; the server checks it (``Platform.authenticate``) and
answers with a cookie holding a fresh random token (256 bits). The key never reaches the browser
again and is never in a URL. What the token stands for is kept in the store's state facet, under a
namespace no State API route can name (``NAMESPACE``: its kind is not a scope), keyed by the token's
SHA-256: ``{key_hash, created_at, csrf}``, written with a TTL (``SESSION_TTL_S``). Every console
request reads that record and then the key itself (``key_by_hash``), so a revoked key signs its
browsers out at once, in every server process sharing the store; sign-out deletes the record.

**Cookie.** ``HttpOnly; SameSite=Strict; Path=/console/``, and ``Secure`` when the request came over
HTTPS as the ASGI server saw it. uvicorn (``keepstate serve``) takes ``X-Forwarded-Proto`` only from
the addresses in ``FORWARDED_ALLOW_IPS`` (default 127.0.0.1: a proxy on the same machine), so a
client cannot make a plain-HTTP cookie look secure, and a TLS proxy in front gets ``Secure`` cookies.

**Forgery.** Every form posts a hidden ``csrf`` value, compared in constant time with the one kept
in the console session's record (one value per sign-in, the same in every server process). The
sign-in form, which has no session yet, carries a random value that must equal a short-lived
cookie's (double submit), so another site cannot sign a browser in with its own key. On top, every
POST must come from this origin (``Origin``, else ``Referer``, naming the request's own host), and
SameSite=Strict keeps the cookie off cross-site requests in the first place.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
from starlette.requests import Request

from ... import values
from ...clock import now_ms
from ...errors import Forbidden, InvalidRequest, KeepstateError, Unauthorized
from ...platform.auth import hash_secret
from ...platform.models import Caller
from ...platform.service import Platform
from ...stores.records import CONSOLE_SESSIONS
from ..http import read_body

COOKIE = "keepstate_console"
FORM_COOKIE = "keepstate_console_form"
COOKIE_PATH = "/console/"
SESSION_TTL_S = 12 * 3600
FORM_TTL_S = 3600
NAMESPACE = CONSOLE_SESSIONS
"""Where console sessions live: ``keepstate/console/sessions/``. A State API namespace is
``{env}/{run|session|agent|user}/...``, so no route of the API can read or write here."""
MAX_SECRET = 512
MAX_FIELDS = 20
FORM_TYPE = "application/x-www-form-urlencoded"
CONSOLE_ROLES = ("admin", "member")


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A signed-in browser: who it acts as, its forms' anti-forgery value, its record's key."""

    caller: Caller
    csrf: str
    record: str

    @property
    def is_admin(self) -> bool:
        return self.caller.is_admin


def new_token() -> str:
    return secrets.token_urlsafe(32)


async def sign_in(platform: Platform, secret: str) -> str:
    """Check an API key and open a console session for it; the cookie's token.

    Unauthorized for an unknown or revoked key, Forbidden for a worker key (the console acts for people)."""
    if not secret or len(secret) > MAX_SECRET:
        raise Unauthorized("enter an API key")
    caller = await platform.authenticate(f"Bearer {secret}")
    if caller.role not in CONSOLE_ROLES:
        raise Forbidden(f"a {caller.role} key cannot sign in: the console needs an admin or member key")
    token = new_token()
    record = {"key_hash": hash_secret(secret), "created_at": now_ms(), "csrf": new_token()}
    await platform.state.put(NAMESPACE, hash_secret(token), values.encode(record), 0, SESSION_TTL_S * 1000)
    return token


async def signed_in(platform: Platform, request: Request) -> SignedIn:
    """The browser's console session, checked against its key now; Unauthorized when there is none,
    it expired, or its key was revoked (then the record goes too)."""
    token = request.cookies.get(COOKIE)
    if not token or len(token) > MAX_SECRET:
        raise Unauthorized("not signed in")
    record_key = hash_secret(token)
    entry = await platform.state.get(NAMESPACE, record_key)
    if entry is None:
        raise Unauthorized("signed out")
    record: dict[str, Any] = orjson.loads(entry.data)
    key = await platform.repo.key_by_hash(record["key_hash"])
    if key is None or key.revoked or key.role not in CONSOLE_ROLES:
        await platform.state.delete(NAMESPACE, record_key)
        raise Unauthorized("this key was revoked: signed out")
    caller = Caller(key.env, key.role, key.id, key_hash=record["key_hash"], name=key.name)  # recheck-able
    return SignedIn(caller, record["csrf"], record_key)


async def sign_out(platform: Platform, signed: SignedIn) -> None:
    await platform.state.delete(NAMESPACE, signed.record)


async def read_form(request: Request) -> dict[str, str]:
    """A POSTed form's fields (the first of each name; none for an empty body), after the same-origin
    check. The body is bounded as every request's is (413 past it)."""
    if not same_origin(request):
        raise Forbidden("this form was not sent from this console: refused")
    body = await read_body(request)
    if not body:
        return {}
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != FORM_TYPE:
        raise InvalidRequest(f"a console form is sent as {FORM_TYPE}")
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=MAX_FIELDS, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest("the form is not valid UTF-8 form data") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    return fields


async def signed_form(request: Request, signed: SignedIn) -> dict[str, str]:
    """A signed-in browser's form: same origin, and its ``csrf`` field this session's."""
    fields = await read_form(request)
    check_token(fields.get("csrf", ""), signed.csrf)
    return fields


def check_token(sent: str, expected: str) -> None:
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise Forbidden("this form's anti-forgery token is missing or wrong: reload the page and try again")


def same_origin(request: Request) -> bool:
    """Whether a POST names this server as its origin (``Origin``, else ``Referer``). The host is
    compared, not the scheme: behind a TLS proxy the browser's scheme is not the one the server sees."""
    host = request.headers.get("host")
    source = request.headers.get("origin") or request.headers.get("referer")
    if not host or not source or source == "null":
        return False
    return urlsplit(source).netloc.lower() == host.lower()


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def cookie(name: str, value: str, max_age: int, secure: bool) -> str:
    """A ``Set-Cookie`` value for the console's path (max_age 0 clears it)."""
    flags = "; Secure" if secure else ""
    return f"{name}={value}; Path={COOKIE_PATH}; Max-Age={max_age}; HttpOnly; SameSite=Strict{flags}"


def session_cookie(token: str, request: Request) -> str:
    return cookie(COOKIE, token, SESSION_TTL_S, is_https(request))


def cleared(name: str, request: Request) -> str:
    return cookie(name, "", 0, is_https(request))


async def optional_sign_in(platform: Platform, request: Request) -> SignedIn | None:
    """The browser's console session, or None (an error page shows the menu only to a signed-in browser)."""
    try:
        return await signed_in(platform, request)
    except KeepstateError:
        return None
