"""``redis://host:6379/0?prefix=app:``: the state facet and session leases on one Redis.

Redis declares no platform, no harness and no documents (memory needs a search engine): it holds state
and the session store, not the server's records. redis-py's asyncio client belongs to the event loop
that first uses it, so a Database makes its client there; its sync face runs an inner Database on a
private loop thread.
"""

from __future__ import annotations

from ..base import Capabilities, Database, LeaseFacet
from ..faces import Portal, SyncState
from . import db
from .leases import RedisLeases
from .state import RedisState

try:
    import redis.asyncio as aioredis
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError("Redis support needs the extra: pip install 'keepstate[redis]'") from missing

CAPABILITIES = Capabilities(shared=True, platform=False, leases=True, harness=False, documents=False)


class RedisDatabase(Database):
    capabilities = CAPABILITIES
    loop_bound = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = db.split_prefix(url)[1]
        self._client: aioredis.Redis | None = None
        self._state: RedisState | None = None
        self._sync = SyncState(lambda: RedisDatabase(url))

    async def client(self) -> aioredis.Redis:
        """This Database's client, made (and checked with a PING) in the loop of its first use."""
        if self._client is None:
            client = self._client = db.open_client(self.url)[0]  # set before awaiting: one client per Database
            try:
                with db.translate_errors():
                    await client.ping()
            except BaseException:
                self._client = None
                await client.aclose()
                raise
        return self._client

    async def state(self) -> RedisState:
        if self._state is None:
            self._state = RedisState(await self.client(), self.prefix)
        return self._state

    def sync_state(self) -> Portal:
        return self._sync.face()

    async def leases(self, space: str) -> LeaseFacet:
        return RedisLeases(await self.client(), self.prefix, space)

    async def delete_session(self, env: str, session_id: str, now: int) -> list[str] | None:
        self.capabilities.require("platform", self.url)
        raise AssertionError("unreachable")

    async def ping(self) -> None:
        with db.translate_errors():
            await (await self.client()).ping()

    async def aclose(self) -> None:
        client, self._client, self._state = self._client, None, None
        if client is not None:
            await client.aclose()
        self.close()

    def close(self) -> None:
        self._sync.close()
