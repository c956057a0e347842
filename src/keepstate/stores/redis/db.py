"""Redis connections for every part of keepstate: URL with a key prefix, error translation.

``redis://host:6379/0?prefix=app:`` — every key keepstate writes starts with the prefix
(default ``keepstate:``), so several stores (and test runs) share one Redis without meeting.
``redis+cluster://host:port[,host:port…]/?prefix=app:`` (``rediss+cluster://`` with TLS) — the same
on a Redis Cluster through redis-py's cluster client, which routes each call by its keys' hash slot,
follows ``MOVED``/``ASK`` and refreshes the topology after a failure.
Connection trouble becomes ``Unavailable`` quickly (short socket timeouts), never a hang; no call is
ever sent twice (a resent append would add twice).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...errors import Unavailable
from ..base import redact
from ..ending import cancel_requests, raise_lost_cancel

try:
    import redis.asyncio as aioredis
    import redis.exceptions as redis_errors
    from redis._parsers.commands import AsyncCommandsParser
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("Redis support needs the extra: pip install 'keepstate[redis]'") from missing

TROUBLE = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.BusyLoadingError,
    redis_errors.ReadOnlyError,
    redis_errors.TryAgainError,
    redis_errors.ClusterError,
    redis_errors.RedisClusterException,
    OSError,
)
"""What a Redis call raises when a server cannot be reached or cannot answer yet (on a cluster also: a
slot without a master, the cluster down, a slot still moving, redirections that never end):
Unavailable. A script whose keys span slots would raise ``RedisClusterException`` too, but the state
facet refuses such a batch before it sends anything (``Names.check_batch``)."""
MOVING = "Script attempted to access a non local key"
"""What Redis answers a script that reads a key of a slot being moved to another node, gone already:
the call is refused before it writes anything, and can be tried again once the slot has moved."""
DEFAULT_PREFIX = "keepstate:"
SOCKET_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 3.0
SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")
Client = aioredis.Redis | RedisCluster
"""One Redis's client or a cluster's: the facets use what both have (commands, EVALSHA, pipelines)."""


def _options() -> dict[str, Any]:
    """For one Redis and for a cluster's nodes alike (a Retry of its own each: redis-py may change it)."""
    return {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "health_check_interval": 30,
        "retry": Retry(NoBackoff(), 0),  # redis-py retries 3x by default: a resent append would add twice
    }


def split_prefix(url: str) -> tuple[str, str]:
    """``redis://h/0?prefix=p:`` → (``redis://h/0``, ``p:``)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(f"not a Redis store URL: {url!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((value for name, value in query if name == "prefix"), DEFAULT_PREFIX)
    rest = urlencode([(name, value) for name, value in query if name != "prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix


def open_client(url: str) -> tuple[aioredis.Redis, str]:
    """An asyncio Redis client (connection pool) and the key prefix named by ``url``."""
    plain, prefix = split_prefix(url)
    client = aioredis.Redis.from_url(plain, retry_on_timeout=False, **_options())
    try:  # redis-py takes the URL's options only when it makes a connection: try one now, unconnected
        client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
    except TypeError as error:
        raise _unknown_option(error) from None
    return client, prefix


def open_cluster(url: str) -> tuple[RedisCluster, str]:
    """An asyncio Redis Cluster client seeded with every node the URL names, and the key prefix.

    Connections to a node are made on demand and never capped (as on one Redis): redis-py's cluster
    client would otherwise refuse the 101st call in flight to one node."""
    plain, prefix = split_prefix(url)
    if "{" in prefix or "}" in prefix:
        raise ValueError(
            f"a Redis Cluster store's prefix may not hold {{ or }} (the scopes' hash tags follow it): {prefix!r}"
        )
    first, seeds = _seeds(plain, url)
    try:
        client = RedisCluster.from_url(
            first, startup_nodes=[ClusterNode(h, p) for h, p in seeds], max_connections=2**31, **_options()
        )
    except TypeError as error:
        raise _unknown_option(error) from None
    client.commands_parser = _CommandTable(client)
    return client, prefix


def _seeds(plain: str, url: str) -> tuple[str, list[tuple[str, int]]]:
    """The first seed as a ``redis://`` URL (credentials and options kept), and the other seeds."""
    parts = urlsplit(plain)
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError(f"a Redis Cluster has one database, 0: {parts.path!r} in {redact(url)}")
    credentials, at, hosts = parts.netloc.rpartition("@")
    (host, port), *others = [_host_port(seed) for seed in hosts.split(",")]
    netloc = f"{credentials}{at}{f'[{host}]' if ':' in host else host}:{port}"
    return urlunsplit((parts.scheme.removesuffix("+cluster"), netloc, "", parts.query, "")), others


def _host_port(seed: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``host`` (port 6379) of one seed node."""
    host, colon, port = seed.rpartition(":")
    if not colon or host.endswith(":") or (host.startswith("[") and not host.endswith("]")):
        host, port = seed, "6379"
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"a Redis Cluster seed must be host:port, got {seed!r}")
    return host, int(port)


def _unknown_option(error: TypeError) -> ValueError:
    return ValueError(f"a Redis store URL option is not one redis-py knows: {error}")


class _CommandTable(AsyncCommandsParser):
    """redis-py's cluster client reads the command table (COMMAND) from the cluster's first master at
    every topology refresh, and fails the refresh — so every call, to any slot — while that one master
    does not answer. The table does not change with the topology: read it once, from any master."""

    def __init__(self, client: RedisCluster) -> None:
        super().__init__()
        self._client = client

    async def initialize(self, node: ClusterNode | None = None) -> None:
        if self.commands:
            return
        candidates = [node] if node is not None else []
        trouble: BaseException | None = None
        for candidate in [*candidates, *self._client.get_primaries()]:
            try:
                await super().initialize(candidate)
                return
            except TROUBLE as error:
                trouble = error
        raise trouble or redis_errors.ConnectionError("no Redis Cluster node answered COMMAND")


class Script:
    """A Lua script run by its SHA-1 (EVALSHA), sent whole (EVAL) when the server does not know it
    (a restart, a failover, SCRIPT FLUSH). What redis-py's ``register_script`` does, without its per-call steps
    for pipelines (~1.4 µs of the ~3 µs keepstate spends around a write)."""

    __slots__ = ("_client", "_sha", "_text")

    def __init__(self, client: Client, text: str) -> None:
        self._client, self._text = client, text
        self._sha = hashlib.sha1(text.encode()).hexdigest()

    async def __call__(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self._client.evalsha(self._sha, len(keys), *keys, *args)
        except redis_errors.NoScriptError:  # EVAL caches it on the node that runs it (SCRIPT LOAD would
            return await self._client.eval(self._text, len(keys), *keys, *args)  # wait on every master)

    async def pipelined(self, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> list[Any]:
        """One run per ``(keys, args)``, in one pipeline (one per node on a cluster), each sending the script
        whole (EVAL): a pipeline cannot send it again midway to a server that lacks it, and redis-py's
        cluster pipeline refuses EVALSHA."""
        async with self._client.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                pipe.eval(self._text, len(keys), *keys, *args)
            results: list[Any] = await pipe.execute()
        return results


class translate_errors:  # a class, not a generator: it wraps every Redis call (~0.3 µs against ~2)
    """Connection trouble becomes Unavailable; a script error stays a bug; a cancellation that
    redis-py's send swallowed (``asyncio.wait_for``, see ``raise_lost_cancel``) is raised."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = cancel_requests()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if error is None:
            raise_lost_cancel(self._before)
        elif isinstance(error, TROUBLE) or str(error).startswith(MOVING):
            raise Unavailable(f"redis: {error}") from error
