"""The I/O-free half of the SDK: configuration, request descriptions, retry decisions, answers.

Following httpx's ``BaseClient`` and psycopg's ``_connection_base``, everything that does not
touch the network lives here, once. A ``Call`` describes one API request completely (method, path,
body, which credential, whether a repeat is safe, how to read the answer); the sync and async
faces (``_sync.py``, ``_async.py``) only send it, sleep between attempts and hand the answer back.

Retries, and why only these: a request that never reached the server (connection refused) is
always retried; a 502/503/504 or a lost answer is retried only when repeating the call cannot do
anything twice — GETs, writes to the routes that take an ``Idempotency-Key`` (``Call.write``: the
key is made once with the call and sent on every attempt, so the server applies it once and
answers a repeat with the first answer), session creation with an explicit id, and a heartbeat
(it only renews a lease). A 503 waits for its ``Retry-After``; a 409 ``idempotency_in_flight``
(the first attempt is still being applied) is waited out with the backoff.
"""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote, urlsplit

import httpx
import orjson

from .. import values
from ..errors import IdempotencyInFlight, KeepstateError, Unavailable, from_wire
from ..protocol import IDEMPOTENCY_KEY_HEADER, RUN_TOKEN_HEADER

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8420"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 3
MAX_RETRY_AFTER = 30.0
RETRY_STATUSES = frozenset({502, 503, 504})
USER_AGENT = "keepstate-python"


@dataclass(frozen=True, slots=True)
class Config:
    """Where and as whom to talk: base URL, key, timeout and retry budget."""

    base_url: str
    key: str | None
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES

    @classmethod
    def build(
        cls, base_url: str | None, key: str | None, timeout: float = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES
    ) -> Config:
        """Fill ``base_url`` and ``key`` from ``KEEPSTATE_URL`` / ``KEEPSTATE_KEY`` when not given.

        Raises ValueError for a base URL that is not ``http://host[:port]`` or ``https://host[:port]``
        (an optional path allowed), so a typo is an error here, not ``Unavailable`` at the first call."""
        source = "base_url" if base_url else "KEEPSTATE_URL" if os.environ.get("KEEPSTATE_URL") else "default"
        url = check_base_url(base_url or os.environ.get("KEEPSTATE_URL") or DEFAULT_URL, source)
        return cls(url.rstrip("/"), key or os.environ.get("KEEPSTATE_KEY") or None, float(timeout), retries)

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client``/``httpx.AsyncClient`` (connection reuse is httpx's pool)."""
        return {
            "base_url": self.base_url,
            "timeout": httpx.Timeout(self.timeout),
            "headers": {"user-agent": USER_AGENT, "accept": "application/json"},
        }


def check_base_url(url: str, source: str = "base_url") -> str:
    """``url`` when it is the base URL of a server; else ValueError naming it and the expected form."""
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme in ("http", "https") and parts.hostname and port_ok and not (parts.query or parts.fragment):
        return url
    hint = f" (did you mean http://{url}?)" if "://" not in url else ""
    raise ValueError(
        f"{source} {url!r} is not a keepstate server URL: expected http://host:port or https://host[:port]{hint}"
    )


def _keep(answer: Any) -> Any:
    return answer


def _none(answer: Any) -> None:
    return None


def fresh_key() -> str:
    """A new idempotency key: 22 characters of the key charset, 128 random bits."""
    return secrets.token_urlsafe(16)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API request, fully described: send it, then ``parse`` the JSON answer of a 2xx.

    ``auth`` picks the credential: the client's key (``Authorization: Bearer``) or a run token.
    ``safe``: repeating it after it may have reached the server cannot do anything twice.
    ``idempotency_key``: a write's ``Idempotency-Key``, the same on every attempt (``Call.write``).
    ``long_poll``: seconds the server may hold the answer, added to the timeout.
    ``absent``: what a 404 means instead of an error (state reads: ``(None, 0)``).
    """

    method: str
    path: str
    parse: Callable[[Any], T]
    content: bytes | None = None
    params: dict[str, str] = field(default_factory=dict)
    auth: Literal["key", "token"] = "key"
    token: str | None = None
    safe: bool = False
    long_poll: float = 0.0
    absent: Callable[[], T] | None = None
    absent_names_key: bool = False
    """Take a 404 as ``absent`` only when it names the key (a caller's path can 404 for its session)."""
    idempotency_key: str | None = None

    @classmethod
    def write(
        cls, method: str, path: str, parse: Callable[[Any], T], content: bytes | None = None, **fields: Any
    ) -> Call[T]:
        """A call to a route that takes an ``Idempotency-Key`` (every write the HTTP API's "Idempotent
        writes" lists), with a fresh one: made now, once, so every retry of this call repeats it and
        the server applies the write once however many attempts reach it."""
        return cls(method, path, parse, content, idempotency_key=fresh_key(), **fields)

    @property
    def repeatable(self) -> bool:
        """Safe to send again after it may have reached the server: by its nature, or by its key."""
        return self.safe or self.idempotency_key is not None

    def headers(self, config: Config) -> dict[str, str]:
        headers = {"content-type": "application/json"} if self.content is not None else {}
        if self.auth == "token":
            headers[RUN_TOKEN_HEADER] = self.token or ""
        elif config.key:
            headers["authorization"] = f"Bearer {config.key}"
        if self.idempotency_key is not None:
            headers[IDEMPOTENCY_KEY_HEADER] = self.idempotency_key
        return headers

    def timeout(self, config: Config) -> httpx.Timeout:
        return httpx.Timeout(config.timeout + self.long_poll)

    def request(self, config: Config) -> dict[str, Any]:
        """Keyword arguments of ``httpx.Client.request`` / ``httpx.AsyncClient.request`` for one attempt."""
        return {
            "method": self.method,
            "url": self.path,
            "params": self.params,
            "content": self.content,
            "headers": self.headers(config),
            "timeout": self.timeout(config),
        }


def body(payload: dict[str, Any]) -> bytes:
    """Encode a request body, leaving out None fields; values are checked like the store checks them."""
    return values.encode({name: value for name, value in payload.items() if value is not None})


def segment(text: str) -> str:
    """One path segment. Dots alone are escaped so that ``.`` and ``..`` stay keys, not path steps."""
    if text and set(text) == {"."}:
        return "%2E" * len(text)
    return quote(text, safe="")


def query(**params: Any) -> dict[str, str]:
    """Query parameters, leaving out None; numbers as JSON would write them."""
    return {name: _param(value) for name, value in params.items() if value is not None}


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# -- answers ---------------------------------------------------------------------------------


def decode(content: bytes) -> Any:
    if not content:
        return None
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content.decode("utf-8", "replace")


def finish(call: Call[T], status: int, content: bytes) -> T:
    """The parsed answer of a final response, or the exact KeepstateError the server sent."""
    answer = decode(content)
    if 200 <= status < 300:
        return call.parse(answer)
    if status == 404 and call.absent is not None and (not call.absent_names_key or _names_key(answer)):
        return call.absent()
    raise from_wire(status, answer)


def _names_key(answer: Any) -> bool:
    """An absent key's 404 names it; a caller's 404 for a session or run it may not see does not."""
    return isinstance(answer, dict) and "key" in answer


def transport_error(error: httpx.TransportError, config: Config) -> KeepstateError:
    """httpx's exceptions never reach a caller: a failed exchange is ``Unavailable``."""
    detail = str(error) or type(error).__name__
    return Unavailable(f"cannot reach keepstate at {config.base_url}: {detail}")


# -- retries ---------------------------------------------------------------------------------


def backoff(attempt: int) -> float:
    """Jittered exponential backoff: about 0.1, 0.2, 0.4 … seconds, capped at 5."""
    return float(random.uniform(0.5, 1.0) * min(5.0, 0.1 * 2**attempt))


def retry_after_error(call: Call[Any], attempt: int, error: httpx.TransportError, config: Config) -> float | None:
    """Seconds to wait before repeating after a transport error, or None to give up. Any such error
    may have lost the answer of a request that was applied (a read timeout, a dropped connection):
    only a never-sent request or a repeatable call is sent again."""
    if attempt >= config.retries:
        return None
    never_sent = isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
    return backoff(attempt) if never_sent or call.repeatable else None


def retry_after_status(call: Call[Any], attempt: int, response: httpx.Response, config: Config) -> float | None:
    """Seconds to wait before repeating after ``response``, or None to take it as the answer."""
    if not call.repeatable or attempt >= config.retries:
        return None
    if response.status_code in RETRY_STATUSES:
        wait = _parse_retry_after(response.headers.get("retry-after"))
        return backoff(attempt) if wait is None else min(wait, MAX_RETRY_AFTER)
    if response.status_code == 409 and call.idempotency_key is not None and _in_flight(response.content):
        return backoff(attempt)
    return None


def _in_flight(content: bytes) -> bool:
    """A 409 saying the first attempt with this key is still being applied: its answer will come."""
    answer = decode(content)
    return isinstance(answer, dict) and answer.get("error") == IdempotencyInFlight.code


def _parse_retry_after(header: str | None) -> float | None:
    if not header:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
