"""The lease facet on Redis: SET NX PX leases with a fencing counter, every step one Lua script.

Per session (keys share the hash tag ``{id}``, so a cluster keeps them in one slot):
``...:lease`` holds the current token with a PX expiry (Redis's own clock), ``...:fence`` a counter
INCR'd on every grant and never expired (so tokens only grow), ``...:data`` a hash of the state
bytes, its expiry, whether expiry is suspended (``PEXPIREAT`` only when it is not) and its version.
Redis deletes an expired blob itself, so a purge has nothing to do here.

Grant, renew and release compare the token inside a script; every fenced write is a script that
compares the caller's token with ``...:fence`` and writes in the same atomic step. A naive
``GET`` ... ``SET`` never happens. What Redis does *not* give: with asynchronous replication a
failover can lose a recent lease or fence increment (see docs/session-store.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ..base import LeaseFacet
from ..records import Blob, BlobRecord
from .db import Client, Script, translate_errors

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
_REPLACE = """
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'd', ARGV[2], 'e', ARGV[3], 'p', ARGV[4], 'v', v)
if ARGV[3] ~= '' and ARGV[4] ~= '1' then redis.call('PEXPIREAT', KEYS[1], ARGV[3]) end
return v
"""
LUA_WRITE = _FENCE + "local v = (tonumber(redis.call('HGET', KEYS[1], 'v')) or 0) + 1\n" + _REPLACE
LUA_RESTORE = "local v = ARGV[5]\n" + _REPLACE
LUA_REMOVE = (
    _FENCE
    + """
redis.call('DEL', KEYS[1])
return 1
"""
)
LUA_TOUCH = (
    _FENCE
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'e', ARGV[2])
  if redis.call('HGET', KEYS[1], 'p') ~= '1' then redis.call('PEXPIREAT', KEYS[1], ARGV[2]) end
end
return 1
"""
)
_SPACES = {"sessions": "sess", "tokens": "sesstok"}


class RedisLeases(LeaseFacet):
    poll_first = 0.005
    poll_max = 0.2
    expires_itself = True

    def __init__(self, client: Client, prefix: str, space: str = "sessions") -> None:
        self._client = client
        self._base = prefix + _SPACES[space] + ":"
        self._lease_base = prefix + "sess:"
        self._scripts = {
            name: Script(client, lua)
            for name, lua in (
                ("acquire", LUA_ACQUIRE),
                ("renew", LUA_RENEW),
                ("release", LUA_RELEASE),
                ("write", LUA_WRITE),
                ("remove", LUA_REMOVE),
                ("touch", LUA_TOUCH),
                ("restore", LUA_RESTORE),
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
            fields = await self._client.hmget(self._data_keys(id)[0], ["d", "e", "p", "v"])
        return _blob(fields)

    async def write(self, id: str, stored: Blob, token: int | None) -> int | None:
        version = await self._run("write", self._data_keys(id), [_token(token), *_fields(stored)])
        return int(version) or None

    async def remove(self, id: str, token: int | None) -> bool:
        return await self._ok("remove", self._data_keys(id), [_token(token)])

    async def touch(self, id: str, expires_at: int, token: int | None) -> bool:
        return await self._ok("touch", self._data_keys(id), [_token(token), expires_at])

    async def records(self) -> AsyncIterator[BlobRecord]:
        """Every blob's id from a SCAN (sorted), then each blob as it is when read."""
        pattern, tail = _glob_escape(self._base) + "{*}:data", len("}:data")
        with translate_errors():
            keys = [key async for key in self._client.scan_iter(match=pattern, count=1000)]
        for id in sorted(_text(key)[len(self._base) + 1 : -tail] for key in keys):
            found = await self.read(id)
            if found is not None:
                yield BlobRecord(id, found)

    async def restore(self, record: BlobRecord) -> None:
        await self._run("restore", self._data_keys(record.id), ["", *_fields(record.blob), record.blob.version])

    async def purge(self, before: int, limit: int) -> int:
        return 0  # Redis deletes an expired blob (PEXPIREAT) itself

    async def count_purgeable(self, before: int) -> int:
        return 0

    async def _ok(self, name: str, keys: list[str], args: list[Any]) -> bool:
        return bool(await self._run(name, keys, args) == 1)

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        with translate_errors():
            return await self._scripts[name](keys=keys, args=args)


def _token(token: int | None) -> str:
    return "" if token is None else str(token)


def _fields(blob: Blob) -> list[Any]:
    expires = "" if blob.expires_at is None else blob.expires_at
    return [blob.data, expires, "1" if blob.pinned else "0"]


def _blob(fields: list[Any]) -> Blob | None:
    data, expires, pinned, version = fields
    if data is None:
        return None
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    return Blob(raw, int(expires) if expires else None, pinned in (b"1", "1"), int(version or 1))


def _text(key: bytes | str) -> str:
    return key.decode("utf-8") if isinstance(key, bytes) else key


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
