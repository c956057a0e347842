"""The state facet on Redis: every guarded write one Lua script, so each key changes atomically.

Layout, every name starting with the URL's prefix ``P`` and carrying the hash tag ``{ns}`` so one
namespace lives in one cluster slot (the scripts may then name its keys freely):
- ``P{ns}:h:KEY`` — a hash per key: ``v`` version, ``k`` kind (``v`` value, ``l`` appended list,
  ``d`` tombstone keeping the last version, so versions never repeat), ``d`` the canonical JSON bytes
  of a value, ``s``/``n`` a list's size in bytes and length;
- ``P{ns}:l:KEY`` — an appended list's items, one Redis LIST element of item JSON each: an append is
  an RPUSH (its cost does not grow with the list), a read joins them inside a script;
- ``P{ns}:keys`` — a sorted set of the live keys, all at score 0, so ``keys()`` pages them in byte
  order with ZRANGEBYLEX; the scripts keep it in step with the hashes.

A value stored by ``put`` that is a JSON list becomes a Redis LIST on its first append: Python splits
it and a script swaps it in only if the version is still the one read (a compare-and-set, so a
concurrent write is never lost); the swap keeps the version and the value, only the layout changes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import NotAList, TooLarge, VersionConflict
from ...values import MAX_VALUE_BYTES
from ..base import StateFacet
from ..lists import split_list
from ..records import Entry, StateRecord, prefix_end
from .db import translate_errors

if TYPE_CHECKING:
    import redis.asyncio as aioredis

DROP_BATCH = 500
EXPORT_BATCH = 500
CONVERT_TRIES = 50

# ---------------------------------------------------------------- Lua text

_PUSH = """
local function push(list, from)
  for i = from, #ARGV, 1000 do
    redis.call('RPUSH', list, unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
"""

_GUARD = """
-- The header of KEYS[1] (HMGET v, k), its kind, its current version (0 when absent or deleted),
-- and whether if_version ('' for none) holds: the check that PUT and DELETE share.
local function guard(if_version)
  local h = redis.call('HMGET', KEYS[1], 'v', 'k')
  local kind = h[2] or 'd'
  local current = 0
  if kind ~= 'd' then current = tonumber(h[1]) end
  return h, kind, current, if_version == '' or tonumber(if_version) == current
end
"""

# KEYS: header, list, index. ARGV: key, data, if_version ('' for none). Returns {ok, version}.
PUT = _GUARD + """
local h, kind, current, holds = guard(ARGV[3])
if not holds then return {0, current} end
if kind == 'l' then redis.call('DEL', KEYS[2]); redis.call('HDEL', KEYS[1], 's', 'n') end
if kind == 'd' then redis.call('ZADD', KEYS[3], 0, ARGV[1]) end
local version = (tonumber(h[1]) or 0) + 1
redis.call('HSET', KEYS[1], 'v', string.format('%d', version), 'k', 'v', 'd', ARGV[2])
return {1, version}
"""

# KEYS: header, list, index. ARGV: key, max bytes, payload bytes (items + commas), item... .
# Returns {version, length}, or {-2} for a stored value (convert or NotAList), {-3, size} when too large.
APPEND = _PUSH + """
local h = redis.call('HMGET', KEYS[1], 'k', 's', 'n', 'v')
local kind = h[1] or 'd'
if kind == 'v' then return {-2} end
local count = #ARGV - 3
local length = 0
local size = 2
if kind == 'l' then length = tonumber(h[3]); size = tonumber(h[2]) end
if count > 0 then
  if length > 0 then size = size + 1 + tonumber(ARGV[3]) else size = 2 + tonumber(ARGV[3]) end
end
if size > tonumber(ARGV[2]) then return {-3, size} end
if kind == 'd' then redis.call('ZADD', KEYS[3], 0, ARGV[1]) end
push(KEYS[2], 4)
local version = (tonumber(h[4]) or 0) + 1
redis.call('HSET', KEYS[1], 'v', string.format('%d', version), 'k', 'l', 's', size, 'n', length + count)
return {version, length + count}
"""

# KEYS: header, list. ARGV: version read, size, item... . Swaps a stored list value for a LIST if unchanged.
CONVERT = _PUSH + """
local h = redis.call('HMGET', KEYS[1], 'v', 'k')
if h[2] ~= 'v' or tonumber(h[1]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[2])
push(KEYS[2], 3)
redis.call('HSET', KEYS[1], 'k', 'l', 's', ARGV[2], 'n', #ARGV - 2)
redis.call('HDEL', KEYS[1], 'd')
return 1
"""

# KEYS: header, list, index. ARGV: key, if_version ('' for none). Returns {ok, deleted or current version}.
DELETE = _GUARD + """
local h, kind, current, holds = guard(ARGV[2])
if not holds then return {0, current} end
if kind == 'd' then return {1, 0} end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'k', 'd')
redis.call('HDEL', KEYS[1], 'd', 's', 'n')
redis.call('ZREM', KEYS[3], ARGV[1])
return {1, 1}
"""

# KEYS: header, list. Returns {version, kind, data}: a list joined into its JSON; no data for a tombstone.
READ = """
local h = redis.call('HMGET', KEYS[1], 'v', 'k', 'd')
if not h[2] then return {} end
if h[2] == 'l' then
  return {tonumber(h[1]), 'l', '[' .. table.concat(redis.call('LRANGE', KEYS[2], 0, -1), ',') .. ']'}
end
if h[2] == 'v' then return {tonumber(h[1]), 'v', h[3]} end
return {tonumber(h[1]), 'd'}
"""

# KEYS: index. ARGV: min, max, limit, header name base. Returns key, version, key, version, ...
KEYS_PAGE = """
local names = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, name in ipairs(names) do
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGET', ARGV[4] .. name, 'v')
end
return out
"""

# KEYS: index. ARGV: header name base, list name base, batch. Tombstones one batch of live keys.
DROP = """
local names = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
for _, name in ipairs(names) do
  redis.call('HSET', ARGV[1] .. name, 'k', 'd')
  redis.call('HDEL', ARGV[1] .. name, 'd', 's', 'n')
  redis.call('DEL', ARGV[2] .. name)
end
if #names > 0 then redis.call('ZREM', KEYS[1], unpack(names)) end
return #names
"""

# KEYS: header, list, index. ARGV: key, version, kind ('v' or 'd'), data. Writes a record as exported.
RESTORE = """
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[1], 'd', 's', 'n')
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'k', ARGV[3])
if ARGV[3] == 'v' then
  redis.call('HSET', KEYS[1], 'd', ARGV[4])
  redis.call('ZADD', KEYS[3], 0, ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
return 1
"""


# ---------------------------------------------------------------- key naming (pure)

class Names:
    """Redis key names for one store prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def base(self, ns: str, part: str) -> str:
        return f"{self.prefix}{{{ns}}}:{part}:"

    def of(self, ns: str, key: str) -> list[str]:
        """header, list and index names of one key, the KEYS of most scripts."""
        return [self.base(ns, "h") + key, self.base(ns, "l") + key, self.index(ns)]

    def index(self, ns: str) -> str:
        return f"{self.prefix}{{{ns}}}:keys"

    def header_pattern(self) -> str:
        escaped = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix)
        return escaped + "{*}:h:*"

    def parse_header(self, name: bytes) -> tuple[str, str]:
        """(ns, key) of a header name ``P{ns}:h:key``."""
        rest = name.decode()[len(self.prefix) + 1:]
        ns, _, key = rest.partition("}:h:")
        return ns, key


def lex_bounds(prefix: str, after: str) -> tuple[str, str]:
    """ZRANGEBYLEX bounds for keys ``> after`` that start with ``prefix``."""
    low = "(" + after if after and after >= prefix else "[" + prefix if prefix else "-"
    return low, ("(" + prefix_end(prefix) if prefix else "+")


def _arg(if_version: int | None) -> str | int:
    return "" if if_version is None else if_version


class RedisState(StateFacet):
    """The state facet on one Redis (its keys under the URL's prefix)."""

    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self.client = client
        self.names = Names(prefix)
        self._put = client.register_script(PUT)
        self._append = client.register_script(APPEND)
        self._convert = client.register_script(CONVERT)
        self._delete = client.register_script(DELETE)
        self._read = client.register_script(READ)
        self._keys = client.register_script(KEYS_PAGE)
        self._drop = client.register_script(DROP)
        self._restore = client.register_script(RESTORE)

    async def get(self, ns: str, key: str) -> Entry | None:
        header = self.names.base(ns, "h") + key
        async with translate_errors():
            version, kind, data = await self._header(header)
            if kind == b"v":
                return Entry(data, int(version))
            if kind != b"l":
                return None
            found = await self._read(keys=self.names.of(ns, key)[:2])
        return Entry(found[2], int(found[0])) if found and found[1] != b"d" else None

    async def _header(self, name: str) -> list[Any]:
        """version, kind and value of one key's hash (each None when absent)."""
        found: list[Any] = await self.client.hmget(name, ["v", "k", "d"])
        return found

    async def put(self, ns: str, key: str, data: bytes, if_version: int | None = None) -> int:
        async with translate_errors():
            ok, version = await self._put(keys=self.names.of(ns, key), args=[key, data, _arg(if_version)])
        if not ok:
            raise VersionConflict(current_version=int(version))
        return int(version)

    async def delete(self, ns: str, key: str, if_version: int | None = None) -> bool:
        async with translate_errors():
            ok, deleted = await self._delete(keys=self.names.of(ns, key), args=[key, _arg(if_version)])
        if not ok:
            raise VersionConflict(current_version=int(deleted))
        return bool(deleted)

    async def append(self, ns: str, key: str, items: Sequence[bytes]) -> tuple[int, int]:
        args: list[Any] = [key, MAX_VALUE_BYTES, sum(map(len, items)) + max(len(items) - 1, 0), *items]
        names = self.names.of(ns, key)
        async with translate_errors():
            for _ in range(CONVERT_TRIES):
                result = await self._append(keys=names, args=args)
                if result[0] >= 0:
                    return int(result[0]), int(result[1])
                if result[0] == -3:
                    raise TooLarge(f"the list would be {result[1]} bytes, over {MAX_VALUE_BYTES}; nothing was added")
                await self._to_list(names)
        raise VersionConflict(f"{key!r} kept changing while its stored list was converted for appending")

    async def _to_list(self, names: list[str]) -> None:
        """Swap a stored JSON list for a Redis LIST, only if its version is unchanged (else: try again)."""
        version, kind, data = await self._header(names[0])
        if kind == b"v":
            if not data.startswith(b"["):
                raise NotAList("the stored value is not a list")
            await self._convert(keys=names[:2], args=[int(version), len(data), *split_list(data)])

    async def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        low, high = lex_bounds(prefix, after)
        async with translate_errors():
            flat = await self._keys(keys=[self.names.index(ns)], args=[low, high, limit, self.names.base(ns, "h")])
        return [(flat[i].decode(), int(flat[i + 1])) for i in range(0, len(flat), 2)]

    async def drop(self, ns: str) -> None:
        """Tombstone every live key of ``ns``, one atomic batch of keys at a time."""
        args: list[Any] = [self.names.base(ns, "h"), self.names.base(ns, "l"), DROP_BATCH]
        async with translate_errors():
            while await self._drop(keys=[self.names.index(ns)], args=args) == DROP_BATCH:
                pass

    async def records(self) -> AsyncIterator[StateRecord]:
        """Every key, tombstones included, found by SCAN (no order promised)."""
        batch: list[bytes] = []
        async with translate_errors():
            async for name in self.client.scan_iter(match=self.names.header_pattern(), count=EXPORT_BATCH):
                batch.append(name)
                if len(batch) >= EXPORT_BATCH:
                    for record in await self._read_batch(batch):
                        yield record
                    batch = []
            for record in await self._read_batch(batch):
                yield record

    async def _read_batch(self, headers: list[bytes]) -> list[StateRecord]:
        parsed = [self.names.parse_header(name) for name in headers]
        async with translate_errors(), self.client.pipeline(transaction=False) as pipe:
            for ns, key in parsed:
                await self._read(keys=self.names.of(ns, key)[:2], client=pipe)
            results: list[Any] = await pipe.execute()
        return [
            StateRecord(ns, key, int(found[0]), None if found[1] == b"d" else found[2])
            for (ns, key), found in zip(parsed, results, strict=True)
            if found
        ]

    async def restore(self, record: StateRecord) -> None:
        kind, data = ("d", b"") if record.data is None else ("v", record.data)
        async with translate_errors():
            names = self.names.of(record.ns, record.key)
            await self._restore(keys=names, args=[record.key, record.version, kind, data])
