"""Short scripts for the three commonest writes alone: one ``put``, ``append`` or ``incr``.

The engine (``state_lua.WRITE``) plays any batch on a model of its keys before it writes; for one
write that is most of its time: the script defines some thirty functions on every run, parses op
headers and builds a model table per key. These scripts do only what the write needs: read the
key's header (one HMGET), check the version guard, write the hash, the items and offsets, the index
and the expiry set exactly as the engine's ``apply`` does (Redis time per call, INFO commandstats
in one run on a loaded machine: put 24 -> 9 µs, append 23 -> 13 µs, incr 22 -> 10 µs).

They take the usual case only — a put over anything but a list, an incr of a value or of nothing,
an append to a list with offsets or to nothing — and answer ``{'engine'}`` *before writing
anything* for the rest (a put over a Redis list, a value stored whole by ``put`` to append to, a
list written before offsets, an expired list or value still holding its items), which Python then
sends to the engine. So the engine stays the one place for every unusual layout, and
``tests/test_backend_redis.py`` checks from every starting layout that both paths answer and write
the same.

KEYS: header, index, then the expiry set (put, incr), or items, offsets and — only when the append
sets a ttl — the expiry set (append: a kept expiry leaves the set as it is, so an append without a
ttl names one key less). ARGV: key, the guard (``''``, or ``'IF_VERSION TTL_MS'`` with either part
empty), then the write's arguments: every argument is one more to encode and send on each call.
Answers: the new version (put), ``{total, version}`` (incr), ``{version, length}`` (append),
``{'conflict', current}``, ``{'error', code, detail}`` or ``{'engine'}``.
"""

from __future__ import annotations

from ...values import MAX_VALUE_BYTES, MAX_VERSION
from . import state_lua
from .state_lua import _CLOCK, ADD

_HEAD = (
    _CLOCK
    + f"\nlocal MAX_VERSION = {MAX_VERSION}\n"
    + """
-- The key as the engine's load() sees it: live only if a value or list not expired by Redis's clock.
local h, index, expiry, key, iv, ttl = KEYS[1], KEYS[2], KEYS[EXPIRY], ARGV[1], '', ''
if ARGV[2] ~= '' then iv, ttl = string.match(ARGV[2], '^(%d*) (%d*)$') end
local f = redis.call('HMGET', h, 'v', 'k', 'e'FIELDS)
local v, was, e = tonumber(f[1]) or 0, f[2], tonumber(f[3])
local indexed = was == 'v' or was == 'l'
local live = indexed and (e == nil or e > now())
if not live then e = nil end
if iv ~= '' and tonumber(iv) ~= (live and v or 0) then return {'conflict', live and v or 0} end
if v >= MAX_VERSION then return {'error', 'version_limit'} end
v = v + 1

-- Write the hash (the next version, the expiry: a ttl from now, else keep's; then the fields given),
-- the key's place in the expiry set (only when it changes) and the index. Numbers go to Redis as
-- integers (%.17g).
local function write(keep, ...)
  local until_ = keep
  if ttl ~= '' then until_ = now() + tonumber(ttl) end
  if until_ == tonumber(f[3]) and until_ then
    redis.call('HSET', h, 'v', v, ...)
  elseif until_ then
    redis.call('HSET', h, 'v', v, 'e', until_, ...)
    redis.call('ZADD', expiry, until_, h)
  else
    redis.call('HSET', h, 'v', v, ...)
    if f[3] then
      redis.call('HDEL', h, 'e')
      redis.call('ZREM', expiry, h)
    end
  end
  if not indexed then redis.call('ZADD', index, 0, key) end
end
"""
)


def _script(fields: str, body: str, *pieces: str, expiry: int = 3) -> str:
    """``pieces`` (helpers), the head reading ``fields`` beyond version, kind and expiry and finding the
    expiry set at ``KEYS[expiry]``, ``body``."""
    return "".join(pieces) + _HEAD.replace("FIELDS", fields).replace("EXPIRY", str(expiry)) + body


PUT = _script(
    "",
    """
if was == 'l' then return {'engine'} end
write(nil, 'k', 'v', 'd', ARGV[3])
return v
""",
)
"""ARGV[3]: the value. A put over a list (live or expired: its items must go) is the engine's."""

INCR = _script(
    ", 'd'",
    """
if was == 'l' then
  if live then return {'error', 'not_an_integer'} end
  return {'engine'}
end
local from = '0'
if live then from = f[4] end
if not integer(from) then return {'error', 'not_an_integer'} end
local total = add(from, ARGV[3])
if not total then return {'error', 'overflow', from} end
write(e, 'k', 'v', 'd', total)
return {total, v}
""",
    ADD,
)
"""ARGV[3]: the step, a decimal integer. An expired list (its items must go) is the engine's."""

APPEND = _script(
    ", 's', 'n', 'b'",
    """
local count = #ARGV - 2
if count > CHUNK or (indexed and not (live and was == 'l' and f[6])) then return {'engine'} end
local n, s, b = 0, 2, 0
if live then n, s, b = tonumber(f[5]), tonumber(f[4]), tonumber(f[6]) end
local at, ends, bytes = b, {}, 0
if n > 0 then at = s + b - 1 end
for i = 3, #ARGV do
  local length = #ARGV[i]
  bytes, at = bytes + length, at + length + 1
  ends[i - 2] = at
end
if count > 0 then
  local size = bytes + count + 1
  if n > 0 then size = bytes + count + s end
  if size > MAX then return {'error', 'too_large', size} end
  redis.call('RPUSH', KEYS[3], unpack(ARGV, 3))
  redis.call('RPUSH', KEYS[4], unpack(ends))
  n, s = n + count, at - b + 1
end
if live then write(e, 's', s, 'n', n) else write(e, 'k', 'l', 's', s, 'n', n, 'b', b) end
return {v, n}
""",
    f"local MAX, CHUNK = {MAX_VALUE_BYTES}, 1000\n",
    expiry=5,
)
"""KEYS[3], KEYS[4]: items, offsets (KEYS[5], the expiry set, only with a ttl). ARGV[3...]: the items
(at most 1000: more is the engine's, which pushes them in chunks). Only to nothing (absent, a
tombstone) or to a live list with offsets, whose kind and base stay; the engine takes the rest (a
stored value to split or refuse, a list without offsets, an expired key still holding its items or
value)."""


def _kept_once(script: str) -> str:
    """``script`` kept once per idempotency key (``state_lua.ONCE``: the record's name last in KEYS, the
    fingerprint and keep time last in ARGV): a record answers ``{'replayed', …}``; the write's answer,
    the script's last ``return``, is kept as the engine keeps a one-op run's results."""
    body, _, answer = script.rstrip().rpartition("\nreturn ")
    return f"{state_lua.ONCE}{body}\nlocal answer = {answer}\nkeep({{answer}})\nreturn answer\n"


PLAIN = {"put": PUT, "append": APPEND, "incr": INCR}
"""The short scripts by write kind (``RedisState.write``)."""
ONCE = {kind: _kept_once(script) for kind, script in PLAIN.items()}
"""Each with an idempotency key's record (``RedisState.write_once``)."""
