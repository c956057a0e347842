"""``redis://host:6379/0?prefix=app:``: the state facet and session leases on one Redis;
``redis+cluster://host:port[,host:port…]/?prefix=app:`` the same on a Redis Cluster.

Redis declares no platform, no harness and no documents (memory needs a search engine): it holds state
and the session store, not the server's records. redis-py's asyncio client belongs to the event loop
that first uses it, so a Database makes its client there; its sync face runs an inner Database on a
private loop thread.

A cluster is a variant, not another backend: the same facets, scripts and key layout over redis-py's
cluster client (every script's keys share one scope's hash slot), with one expiry set per slot and
no batches across scopes (``state.Names``).
"""

from __future__ import annotations

import asyncio
import dataclasses

from .. import forks
from ..base import Capabilities, Database, LeaseFacet, redact
from ..faces import Portal, SyncState
from ..records import StoredSession
from ..session_forks import Cuts
from . import db
from .leases import RedisLeases
from .state import Names, RedisState

try:
    import redis.asyncio as aioredis
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("Redis support needs the extra: pip install 'keepstate[redis]'") from missing

OWN_BACKUP = "use Redis's own persistence: copy an RDB snapshot (BGSAVE) or the AOF"
"""How this store is backed up: it has no file backup (``keepstate backup``)."""
CAPABILITIES = Capabilities(
    shared=True, platform=False, leases=True, harness=False, documents=False, own_backup=OWN_BACKUP
)


class RedisDatabase(Database):
    capabilities = CAPABILITIES
    loop_bound = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = db.split_prefix(url)[1]
        self._client: db.Client | None = None
        self._opening = asyncio.Lock()
        self._state: RedisState | None = None
        self._sync = SyncState(lambda: type(self)(url))
        forks.forget_in_child(self, RedisDatabase._forget)

    def _forget(self) -> None:
        """In a forked child: the client's connections are the parent's; a new one is made on next use."""
        self._client = None
        self._opening = asyncio.Lock()
        self._state = None

    async def client(self) -> db.Client:
        """This Database's client, made (and checked) in the loop of its first use."""
        if self._client is None:
            async with self._opening:  # one client per Database, handed out only once checked: redis-py's
                if self._client is None:  # cluster client misroutes calls made during its first topology read
                    client = self._open()
                    try:
                        with db.translate_errors():
                            await self._check(client)
                    except BaseException:
                        await self._shut(client)
                        raise
                    self._client = client
        return self._client

    def _open(self) -> db.Client:
        return db.open_client(self.url)[0]

    async def _check(self, client: db.Client) -> None:
        await client.ping()

    async def _shut(self, client: db.Client) -> None:
        await client.aclose()

    def _names(self) -> Names:
        return Names(self.prefix)

    async def state(self) -> RedisState:
        if self._state is None:
            self._state = RedisState(await self.client(), self._names())
        return self._state

    def sync_state(self) -> Portal:
        return self._sync.face()

    async def leases(self, space: str) -> LeaseFacet:
        return RedisLeases(await self.client(), self.prefix, space)

    async def delete_session(self, env: str, session_id: str, now: int) -> list[str] | None:
        self.capabilities.require("platform", self.url)
        raise AssertionError("unreachable")

    async def fork_session(
        self, source: StoredSession, fork: StoredSession, cuts: Cuts
    ) -> tuple[StoredSession, bool] | None:
        self.capabilities.require("platform", self.url)
        raise AssertionError("unreachable")

    async def ping(self) -> None:
        with db.translate_errors():
            await self._check(await self.client())

    async def aclose(self) -> None:
        client, self._client, self._state = self._client, None, None
        if client is not None:
            await self._shut(client)
        self.close()

    def close(self) -> None:
        self._sync.close()


class RedisClusterDatabase(RedisDatabase):
    """The same store on a Redis Cluster: what changes is the client, where expiry sets live, and that a
    batch must stay in one hash slot (``cross_scope_batches`` is not declared)."""

    capabilities = dataclasses.replace(
        CAPABILITIES,
        own_backup="use Redis's own persistence on every master: an RDB snapshot (BGSAVE) or the AOF of each",
        cross_scope_batches=False,
    )

    def _open(self) -> db.Client:
        return db.open_cluster(self.url)[0]

    async def _check(self, client: db.Client) -> None:
        """The topology, read from a seed that answers, and a PING answered by some master: a cluster with
        one master down still serves the others' slots."""
        assert isinstance(client, aioredis.RedisCluster)
        await client.initialize()
        answers = await asyncio.gather(
            *(client.ping(target_nodes=node) for node in client.get_primaries()), return_exceptions=True
        )
        if all(isinstance(answer, BaseException) for answer in answers):
            raise next(answer for answer in answers if isinstance(answer, BaseException))

    async def _shut(self, client: db.Client) -> None:
        """redis-py closes a cluster client's connections only while its topology is current, which it is
        not after a failed call: every node's are closed here too."""
        assert isinstance(client, aioredis.RedisCluster)
        await client.aclose()
        nodes = [*client.get_nodes(), *client.nodes_manager.startup_nodes.values()]  # equal by name, not one object
        await asyncio.gather(*(node.disconnect() for node in nodes), return_exceptions=True)

    def _names(self) -> Names:
        return Names(self.prefix, cluster=redact(self.url))
