"""Redis connections for every part of keepstate: URL with a key prefix, error translation.

``redis://host:6379/0?prefix=app:`` — every key keepstate writes starts with the prefix
(default ``keepstate:``), so several stores (and test runs) share one Redis without meeting.
Connection trouble becomes ``Unavailable`` quickly (short socket timeouts), never a hang.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...errors import Unavailable
from ..ending import cancel_requests, raise_lost_cancel

try:
    import redis.asyncio as aioredis
    import redis.exceptions as redis_errors
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("Redis support needs the extra: pip install 'keepstate[redis]'") from missing

TROUBLE = (redis_errors.ConnectionError, redis_errors.TimeoutError, redis_errors.BusyLoadingError, OSError)
"""What a Redis call raises when the server cannot be reached or cannot answer yet: Unavailable."""
DEFAULT_PREFIX = "keepstate:"
SOCKET_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 3.0


def split_prefix(url: str) -> tuple[str, str]:
    """``redis://h/0?prefix=p:`` → (``redis://h/0``, ``p:``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(f"not a Redis store URL: {url!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((value for name, value in query if name == "prefix"), DEFAULT_PREFIX)
    rest = urlencode([(name, value) for name, value in query if name != "prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix


def open_client(url: str) -> tuple[aioredis.Redis, str]:
    """An asyncio Redis client (connection pool) and the key prefix named by ``url``."""
    plain, prefix = split_prefix(url)
    client = aioredis.Redis.from_url(
        plain, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S,
        health_check_interval=30, retry_on_timeout=False,
        retry=Retry(NoBackoff(), 0),  # redis-py retries 3x by default: a resent append would add twice
    )
    try:  # redis-py takes the URL's options only when it makes a connection: try one now, unconnected
        client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
    except TypeError as error:
        raise ValueError(f"a Redis store URL option is not one redis-py knows: {error}") from None
    return client, prefix


class Script:
    """A Lua script run by its SHA-1 (EVALSHA), sent whole again when the server does not know it
    (a restart, SCRIPT FLUSH). What redis-py's ``register_script`` does, without its per-call steps
    for pipelines (~1.4 µs of the ~3 µs keepstate spends around a write)."""

    __slots__ = ("_client", "_sha", "_text")

    def __init__(self, client: aioredis.Redis, text: str) -> None:
        self._client, self._text = client, text
        self._sha = hashlib.sha1(text.encode()).hexdigest()

    async def __call__(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self._client.evalsha(self._sha, len(keys), *keys, *args)
        except redis_errors.NoScriptError:
            await self._client.script_load(self._text)
            return await self._client.evalsha(self._sha, len(keys), *keys, *args)


class translate_errors:  # a class, not a generator: it wraps every Redis call (~0.3 µs against ~2)
    """Connection trouble becomes Unavailable; a script error stays a bug; a cancellation that
    redis-py's send swallowed (``asyncio.wait_for``, see ``raise_lost_cancel``) is raised."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = cancel_requests()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if error is None:
            raise_lost_cancel(self._before)
        elif isinstance(error, TROUBLE):
            raise Unavailable(f"redis: {error}") from error
