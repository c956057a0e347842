"""The lease facet on Redis: SET NX PX leases with a fencing counter, every step one Lua script.

Per session (keys share the hash tag ``{id}``, so a cluster keeps them in one slot):
``...:lease`` holds the current token with a PX expiry (Redis's own clock), ``...:fence`` a counter
INCR'd on every grant and never expired (so tokens only grow), ``...:data`` a hash of the state
bytes, its expiry and whether expiry is suspended (``PEXPIREAT`` only when it is not).

Grant, renew and release compare the token inside a script; every fenced write is a script that
compares the caller's token with ``...:fence`` and writes in the same atomic step. A naive
``GET`` ... ``SET`` never happens. What Redis does *not* give: with asynchronous replication a
failover can lose a recent lease or fence increment (see docs/session-store.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base import LeaseFacet
from ..records import Blob
from .db import translate_errors

if TYPE_CHECKING:
    import redis.asyncio as aioredis

LUA_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local n = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], n, 'PX', ARGV[1])
return n
"""
LUA_RENEW = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if not held and redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1
end
return 0
"""
LUA_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""
_FENCE = "if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end\n"
LUA_WRITE = _FENCE + """
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'd', ARGV[2], 'e', ARGV[3], 'p', ARGV[4])
if ARGV[3] ~= '' and ARGV[4] ~= '1' then redis.call('PEXPIREAT', KEYS[1], ARGV[3]) end
return 1
"""
LUA_REMOVE = _FENCE + """
redis.call('DEL', KEYS[1])
return 1
"""
LUA_TOUCH = _FENCE + """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'e', ARGV[2])
  if redis.call('HGET', KEYS[1], 'p') ~= '1' then redis.call('PEXPIREAT', KEYS[1], ARGV[2]) end
end
return 1
"""
_SPACES = {"sessions": "sess", "tokens": "sesstok"}


class RedisLeases(LeaseFacet):
    poll_first = 0.005
    poll_max = 0.2

    def __init__(self, client: aioredis.Redis, prefix: str, space: str = "sessions") -> None:
        self._client = client
        self._base = prefix + _SPACES[space] + ":"
        self._lease_base = prefix + "sess:"
        self._scripts = {
            name: self._client.register_script(lua)
            for name, lua in (
                ("acquire", LUA_ACQUIRE), ("renew", LUA_RENEW), ("release", LUA_RELEASE),
                ("write", LUA_WRITE), ("remove", LUA_REMOVE), ("touch", LUA_TOUCH),
            )
        }

    def _lease_keys(self, id: str) -> list[str]:
        return [f"{self._lease_base}{{{id}}}:lease", f"{self._lease_base}{{{id}}}:fence"]

    def _data_keys(self, id: str) -> list[str]:
        return [f"{self._base}{{{id}}}:data", self._lease_keys(id)[1]]

    async def acquire(self, id: str, ttl_ms: int) -> int | None:
        token = await self._run("acquire", self._lease_keys(id), [ttl_ms])
        return None if token is None else int(token)

    async def renew(self, id: str, token: int, ttl_ms: int) -> bool:
        return await self._ok("renew", self._lease_keys(id), [token, ttl_ms])

    async def release(self, id: str, token: int) -> None:
        await self._run("release", self._lease_keys(id), [token])

    async def read(self, id: str) -> Blob | None:
        with translate_errors():
            data, expires, pinned = await self._client.hmget(self._data_keys(id)[0], ["d", "e", "p"])
        if data is None:
            return None
        raw = data if isinstance(data, bytes) else data.encode("utf-8")
        return Blob(raw, int(expires) if expires else None, pinned == b"1")

    async def write(self, id: str, stored: Blob, token: int | None) -> bool:
        expires = "" if stored.expires_at is None else stored.expires_at
        args = [_token(token), stored.data, expires, "1" if stored.pinned else "0"]
        return await self._ok("write", self._data_keys(id), args)

    async def remove(self, id: str, token: int | None) -> bool:
        return await self._ok("remove", self._data_keys(id), [_token(token)])

    async def touch(self, id: str, expires_at: int, token: int | None) -> bool:
        return await self._ok("touch", self._data_keys(id), [_token(token), expires_at])

    async def _ok(self, name: str, keys: list[str], args: list[Any]) -> bool:
        return bool(await self._run(name, keys, args) == 1)

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        with translate_errors():
            return await self._scripts[name](keys=keys, args=args)


def _token(token: int | None) -> str:
    return "" if token is None else str(token)
