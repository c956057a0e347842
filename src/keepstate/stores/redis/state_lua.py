"""The Lua of the Redis state facet: one engine script for every write, and the scripts that read.

Kept apart from ``state.py`` (which names keys, encodes arguments and reads answers) because it is
text the server runs, not Python. Expiry is judged by Redis's own clock (``TIME``, read once per run
and only when a key has an expiry or a write sets one), so a key is absent for every call the moment
it expires, whatever the sweep did.

**The engine** (``WRITE``) runs a list of ops — one for a single call, up to a batch's 100 — in two
phases, because Redis does not roll a script back: first every op is played on an in-script model
of the keys it touches (what the key holds, its version, its expiry, which items of its Redis list
stay, which are added), collecting answers, version conflicts and errors; only when every op holds
does the second phase write each key's final state. A failed batch writes nothing but invisible
layout changes (offsets built for an older list). ``incr`` adds exactly without 64-bit numbers:
``ADD`` works on 9-digit halves of the decimal strings, where Lua's doubles are exact, and refuses a
sum outside signed 64-bit (checked against Python's integers by the tests). Versions, lengths, sizes
and offsets stay far below 2^53.

What the engine cannot do in Lua, it asks Python for and is run again:
- ``convert``: a list stored whole by ``put`` must become a Redis list before an append, trim or
  pop (Lua cannot split JSON without re-encoding it); ``CONVERT`` swaps it in, guarded by version;
- ``need``: a merge patch is computed in Python from the value the engine reports; the next run
  carries the new value with the SHA-1 of the value it was computed from, and the engine answers
  ``stale`` (try again) if the key no longer holds exactly that: a version-guarded compare-and-set.

Layout of one key (names in ``state.Names``): a hash (``v`` version, ``k`` kind ``v``/``l``/``d``,
``d`` value, ``s``/``n`` a list's size and length, ``b`` its base offset, ``e`` expiry ms), a Redis
list of items, a parallel Redis list of *end offsets* (each item's cumulative bytes plus one comma,
from an origin that a trim does not move), so that a trim learns the size of what stays from one
``LINDEX`` at the cut instead of reading what goes. Lists written before offsets existed have no
``b``; their first append or trim builds the offsets once.
"""

from __future__ import annotations

from ...values import MAX_VALUE_BYTES, MAX_VERSION

_CLOCK = """
-- Redis's clock in ms, read once per run and only when needed (a key with an expiry, a ttl).
local NOW
local function now()
  if not NOW then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return NOW
end
"""

_HELPERS = """
-- RPUSH t[from..to] onto key, 1000 at a time (unpack takes no more); numbers written as integers.
local function rpush(key, t, from, to, numbers)
  for i = from, to, 1000 do
    local j = math.min(i + 999, to)
    if numbers then
      local chunk = {}
      for x = i, j do chunk[#chunk + 1] = string.format('%d', t[x]) end
      redis.call('RPUSH', key, unpack(chunk))
    else
      redis.call('RPUSH', key, unpack(t, i, j))
    end
  end
end

-- The end offsets of the strings t[from..to] after origin: each counts its bytes and one comma.
local function offsets(t, from, to, origin)
  local out, at = {}, origin
  for i = from, to do
    at = at + #t[i] + 1
    out[#out + 1] = at
  end
  return out
end

-- Turn a key into a tombstone: its version stays, everything else goes.
local function bury(expiry, header, items, offs, index, key)
  redis.call('DEL', items, offs)
  redis.call('HSET', header, 'k', 'd')
  redis.call('HDEL', header, 'd', 's', 'n', 'b', 'e')
  redis.call('ZREM', index, key)
  redis.call('ZREM', expiry, header)
end
"""

# ---------------------------------------------------------------- the engine

ADD = """
-- The canonical JSON integers (as numbers.py says) that incr takes.
local function integer(text)
  return #text <= 20 and (string.find(text, '^-?0$') or string.find(text, '^-?[1-9]%d*$')) ~= nil
end

-- sign * (high * 1e9 + low) of a decimal integer, both parts carrying the sign.
local function halves(text)
  local sign, digits = 1, text
  if string.sub(text, 1, 1) == '-' then sign, digits = -1, string.sub(text, 2) end
  return sign * (tonumber(string.sub(digits, 1, -10)) or 0), sign * tonumber(string.sub(digits, -9))
end

-- a + b of two decimal integers, exactly: in 9-digit halves every sum stays far below 2^53, where
-- Lua's doubles are exact. nil and 'overflow' when the result leaves signed 64-bit.
local function add(a, b)
  local ah, al = halves(a)
  local bh, bl = halves(b)
  local high, low = ah + bh, al + bl
  -- carry, then give both halves the sign of the whole
  if low >= 1e9 then high, low = high + 1, low - 1e9 elseif low <= -1e9 then high, low = high - 1, low + 1e9 end
  if high > 0 and low < 0 then
    high, low = high - 1, low + 1e9
  elseif high < 0 and low > 0 then
    high, low = high + 1, low - 1e9
  end
  local negative = high < 0 or low < 0
  high, low = math.abs(high), math.abs(low)
  local top = 854775807
  if negative then top = 854775808 end
  if high > 9223372036 or (high == 9223372036 and low > top) then return nil, 'overflow' end
  local text = string.format('%d', low)
  if high > 0 then text = string.format('%d%09d', high, low) end
  if negative then return '-' .. text end
  return text
end
"""
"""``add(a, b)``: exact signed 64-bit addition of decimal strings (``tests/test_backend_redis.py``
checks it against Python's integers)."""

_MODEL = (
    """
local MAX = """
    + str(MAX_VALUE_BYTES)
    + """

-- One key as the ops see it. kind: 'v', 'l' or false (absent, deleted or expired). A list is the
-- part of its Redis list that stays (rdrop items cut from the front, rend from the back, of rn)
-- followed by the items this run adds (virt[vstart..], with their end offsets in voff).
-- want: 'd' when an op of the run needs a value's bytes (read with the rest, not on demand).
-- The table is made whole by one constructor (no rehash as fields are added).
local function load(g, key, want)
  local at = 1 + 4 * (g - 1)
  local h = KEYS[at + 1]
  local f
  if want == 'd' then f = redis.call('HMGET', h, 'v', 'k', 's', 'n', 'b', 'e', 'd') else
    f = redis.call('HMGET', h, 'v', 'k', 's', 'n', 'b', 'e') end
  local was, e = f[2], tonumber(f[6])
  local indexed = was == 'v' or was == 'l'
  local kind = false
  if indexed and (e == nil or e > now()) then kind = was else e = nil end
  local list = kind == 'l'
  local n = list and tonumber(f[4]) or 0
  return {h = h, items = KEYS[at + 2], offs = KEYS[at + 3], index = KEYS[at + 4], key = key,
          v = tonumber(f[1]) or 0, was = was, e = e, indexed = indexed, timed = f[6] ~= false,
          kind = kind, lazy = kind == 'v' and not f[7], data = f[7] or false, fresh = false, dirty = false,
          n = n, s = list and tonumber(f[3]) or 2, b = list and tonumber(f[5]) or false,
          real = list, rn = n, rdrop = 0, rend = 0, virt = list and {}, voff = list and {}, vstart = 1}
end

local function current(st)
  if st.kind then return st.v end
  return 0
end

local function kept(st)
  if st.real then return st.rn - st.rdrop - st.rend end
  return 0
end

-- The JSON a live key holds (a list joined from its items).
local function value(st)
  if st.kind == 'l' then
    local parts = {}
    if kept(st) > 0 then parts = redis.call('LRANGE', st.items, st.rdrop, st.rn - st.rend - 1) end
    for i = st.vstart, #st.virt do parts[#parts + 1] = st.virt[i] end
    return '[' .. table.concat(parts, ',') .. ']'
  end
  if st.lazy then st.data, st.lazy = redis.call('HGET', st.h, 'd'), false end
  return st.data
end

-- A write's expiry: ttl from now, else (keep) the live key's own, else none.
local function expiry(st, ttl, keep)
  if ttl ~= '' then return now() + tonumber(ttl) end
  if keep then return st.e end
  return nil
end

local function written(st, e)
  st.v, st.e, st.dirty = st.v + 1, e, true
end

local function as_value(st, data)
  st.kind, st.data, st.lazy, st.real, st.fresh = 'v', data, false, false, true
end

local function as_list(st)
  st.kind, st.data, st.lazy, st.real = 'l', nil, false, false
  st.n, st.s, st.b = 0, 2, 0
  st.virt, st.voff, st.vstart = {}, {}, 1
end

-- A Redis list written before offsets were kept gets them (a layout change, invisible).
local function ready(st)
  if st.b then return end
  local items = redis.call('LRANGE', st.items, 0, -1)
  redis.call('DEL', st.offs)
  rpush(st.offs, offsets(items, 1, #items, 0), 1, #items, true)
  st.b = 0
  redis.call('HSET', st.h, 'b', 0)
end

local function last(st)
  if st.n > 0 then return st.s + st.b - 1 end
  return st.b
end

local function push(st, from, to)
  local at = last(st)
  for i = from, to do
    at = at + #ARGV[i] + 1
    st.virt[#st.virt + 1] = ARGV[i]
    st.voff[#st.voff + 1] = at
  end
  st.n = st.n + to - from + 1
  if st.n > 0 then st.s = at - st.b + 1 end
end

-- The end offset of item p (0: the oldest present).
local function offset_at(st, p)
  local real = kept(st)
  if p < real then return tonumber(redis.call('LINDEX', st.offs, st.rdrop + p)) end
  return st.voff[st.vstart + p - real]
end

local function drop_front(st, count)
  local top, base, real = last(st), offset_at(st, count - 1), kept(st)
  if count <= real then
    st.rdrop = st.rdrop + count
  else
    if st.real then st.rdrop = st.rdrop + real end
    st.vstart = st.vstart + count - real
  end
  st.n = st.n - count
  if st.n == 0 then st.s, st.b = 2, 0 else st.s, st.b = top - base + 1, base end
end

local function drop_back(st)
  local item
  if #st.virt >= st.vstart then
    item = table.remove(st.virt)
    table.remove(st.voff)
  else
    item = redis.call('LINDEX', st.items, st.rn - st.rend - 1)
    st.rend = st.rend + 1
  end
  st.n = st.n - 1
  if st.n == 0 then st.s, st.b = 2, 0 else st.s = st.s - #item - 1 end
  return item
end

-- nil when st may take list ops; else the reply: not a list, or a stored list Python must split.
local function refused(st, op, i)
  if st.kind ~= 'v' then return nil end
  if string.sub(value(st), 1, 1) ~= '[' then return {'error', i, 'not_a_list'} end
  if not st.fresh then return {'convert', op.g} end
  return error('keepstate: a list written in this run reached a list op unsplit')
end
"""
)

_OPS = """
local OPS = {}

function OPS.put(st, op)
  local e = expiry(st, op.ttl, false)
  as_value(st, ARGV[op.a])
  written(st, e)
  return st.v
end

function OPS.putl(st, op)  -- a put of a list that later ops of the run append to or trim: its items
  local e = expiry(st, op.ttl, false)
  as_list(st)
  push(st, op.a, op.a + op.c - 1)
  written(st, e)
  return st.v
end

function OPS.delete(st, op)
  local live = st.kind
  st.kind, st.e, st.data, st.lazy, st.real = false, nil, false, false, false
  st.dirty = st.dirty or st.indexed
  if live then return 1 end
  return 0
end

function OPS.append(st, op, i)
  local no = refused(st, op, i)
  if no then return nil, no end
  local e = expiry(st, op.ttl, true)
  if st.kind == 'l' then ready(st) else as_list(st) end
  local bytes = 0
  for x = op.a, op.a + op.c - 1 do bytes = bytes + #ARGV[x] end
  local size = st.s
  if op.c > 0 and st.n > 0 then size = st.s + bytes + op.c elseif op.c > 0 then size = 1 + bytes + op.c end
  if size > MAX then return nil, {'error', i, 'too_large', size} end
  push(st, op.a, op.a + op.c - 1)
  written(st, e)
  return {st.v, st.n}
end

function OPS.trim(st, op, i)
  if not st.kind then return {0, 0} end
  local no = refused(st, op, i)
  if no then return nil, no end
  ready(st)
  local keep = tonumber(ARGV[op.a])
  if keep < st.n then drop_front(st, st.n - keep) end
  written(st, expiry(st, op.ttl, true))
  return {st.v, st.n}
end

function OPS.pop(st, op, i)
  if not st.kind then return false end
  local no = refused(st, op, i)
  if no then return nil, no end
  if st.n == 0 then return false end
  local item = drop_back(st)
  written(st, st.e)
  return {item, st.v, st.n}
end

function OPS.incr(st, op, i)
  if st.kind == 'l' then return nil, {'error', i, 'not_an_integer'} end
  local from = '0'
  if st.kind then from = value(st) end
  if not integer(from) then return nil, {'error', i, 'not_an_integer'} end
  local total = add(from, ARGV[op.a])
  if not total then return nil, {'error', i, 'overflow', from} end
  local e = expiry(st, op.ttl, true)
  as_value(st, total)
  written(st, e)
  return {total, st.v}
end

-- ARGV at op.a: none yet (answer 'need' with the value), or the SHA-1 of the value the patch was
-- computed from ('' for absent), then 'v' and the new value, or 'l' and its items.
function OPS.patch(st, op, i)
  local input = false
  if st.kind then input = value(st) end
  if op.c == 0 then return nil, {'need', i, input} end
  if (input and redis.sha1hex(input) or '') ~= ARGV[op.a] then return nil, {'stale', i} end
  local e = expiry(st, op.ttl, true)
  if ARGV[op.a + 1] == 'l' then
    as_list(st)
    push(st, op.a + 2, op.a + op.c - 1)
  else
    as_value(st, ARGV[op.a + 2])
  end
  written(st, e)
  return st.v
end
"""

_APPLY = """
-- Write one key's final state: its hash, its lists, its places in the index and the expiry set.
local function apply(st)
  if not st.dirty then return end
  local v = string.format('%d', st.v)
  if st.was == 'l' and not st.real then redis.call('DEL', st.items, st.offs) end
  if st.kind == 'l' then
    if st.real and kept(st) == 0 then
      redis.call('DEL', st.items, st.offs)
    elseif st.real and (st.rdrop > 0 or st.rend > 0) then
      redis.call('LTRIM', st.items, st.rdrop, st.rn - st.rend - 1)
      redis.call('LTRIM', st.offs, st.rdrop, st.rn - st.rend - 1)
    end
    rpush(st.items, st.virt, st.vstart, #st.virt)
    rpush(st.offs, st.voff, st.vstart, #st.voff, true)
    if st.b then
      redis.call('HSET', st.h, 'v', v, 'k', 'l', 's', st.s, 'n', st.n, 'b', string.format('%d', st.b))
    else  -- a list written before offsets, popped: it stays without them
      redis.call('HSET', st.h, 'v', v, 'k', 'l', 's', st.s, 'n', st.n)
    end
    if st.was == 'v' then redis.call('HDEL', st.h, 'd') end
  elseif st.kind == 'v' then
    redis.call('HSET', st.h, 'v', v, 'k', 'v', 'd', st.data)
    if st.was == 'l' then redis.call('HDEL', st.h, 's', 'n', 'b') end
  else
    redis.call('HSET', st.h, 'v', v, 'k', 'd')
    redis.call('HDEL', st.h, 'd', 's', 'n', 'b')
  end
  if st.e then
    redis.call('HSET', st.h, 'e', string.format('%d', st.e))
    redis.call('ZADD', KEYS[1], st.e, st.h)
  elseif st.timed then
    redis.call('HDEL', st.h, 'e')
    redis.call('ZREM', KEYS[1], st.h)
  end
  if st.kind and not st.indexed then
    redis.call('ZADD', st.index, 0, st.key)
  elseif not st.kind and st.indexed then
    redis.call('ZREM', st.index, st.key)
  end
end
"""

_RUN = (
    f"\nlocal MAX_VERSION = {MAX_VERSION}\n"
    + """-- ARGV, per op: 'code group if_version ttl argc want' (if_version and ttl '' for none), key, args.
local ops, at = {}, 1
while at <= #ARGV do
  local code, g, iv, ttl, c, want = string.match(ARGV[at], '^(%a+) (%d+) (%d*) (%d*) (%d+) (%a?)$')
  local op = {code = code, g = tonumber(g), iv = iv, ttl = ttl, c = tonumber(c), want = want,
              key = ARGV[at + 1], a = at + 2}
  ops[#ops + 1], at = op, op.a + op.c
end

local states, results, conflicts = {}, {}, {}
for i, op in ipairs(ops) do
  local st = states[op.g]
  if not st then
    st = load(op.g, op.key, op.want)
    states[op.g] = st
  end
  if op.iv ~= '' and tonumber(op.iv) ~= current(st) then
    conflicts[#conflicts + 1] = i - 1
    conflicts[#conflicts + 1] = current(st)
  else
    local result, signal = OPS[op.code](st, op, i - 1)
    if signal then return signal end
    if st.v > MAX_VERSION then return {'error', i - 1, 'version_limit'} end  -- nothing applied yet
    results[i] = result
  end
end
if #conflicts > 0 then return {'conflict', unpack(conflicts)} end
for _, st in pairs(states) do apply(st) end
return {'ok', unpack(results)}
"""
)

_ENGINE = _CLOCK + _HELPERS + ADD + _MODEL + _OPS + _APPLY
WRITE = _ENGINE + _RUN
"""KEYS: expiry set, then per key: header, items, offsets, index. ARGV: per op, its header
``'code group if_version ttl argc want'`` (key group from 1; ``''`` for no if_version or ttl; want ``d``
when the run needs the value's bytes), its key, its argc args.
Answers ``{'ok', result...}``, ``{'conflict', index, current...}``, ``{'error', index, code, detail}``,
``{'need', index, value}``, ``{'stale', index}`` or ``{'convert', group}`` (indexes from 0)."""

ONCE = """
-- An idempotent write: the last KEYS is its key's record, the last two ARGV its request's fingerprint and
-- how long the record is kept (ms). A record already there answers; the write keeps one (``keep``).
local record, keep_ms, fingerprint = table.remove(KEYS), table.remove(ARGV), table.remove(ARGV)
local kept = redis.call('HMGET', record, 'f', 'r', 'p')
if kept[1] then return {'replayed', kept[1], cmsgpack.unpack(kept[2]), kept[3]} end
local function keep(results, ...)
  redis.call('HSET', record, 'f', fingerprint, 'r', cmsgpack.pack(results), ...)
  redis.call('PEXPIRE', record, keep_ms)
end
"""
"""The head of a write script kept once per idempotency key (the engine's and the short scripts')."""

_KEEP = """if ARGV[1]:sub(1, 6) == 'patch ' then  -- its answer holds the value written: whole, or the list's items
  keep(results, 'p', ARGV[4] == 'v' and ARGV[5] or '[' .. table.concat(ARGV, ',', 5) .. ']')
else
  keep(results)
end
return {'ok', unpack(results)}"""

ONCE_WRITE = _ENGINE + ONCE + _RUN.replace("return {'ok', unpack(results)}", _KEEP)
"""``WRITE`` of one op kept once per idempotency key (``RedisState.write_once``): KEYS and ARGV as
``WRITE``'s, then the record's name (KEYS) and the fingerprint and keep time (ARGV). Its answers are
``WRITE``'s, and ``{'replayed', fingerprint, {result}, value}`` when the key has a record (``value``: a
patch's). The record (``f`` fingerprint, ``r`` the results, ``p`` a patch's value) is written with the
write itself, only when the write is: a refused write is not remembered."""

CONVERT = (
    _HELPERS
    + """
local h = redis.call('HMGET', KEYS[1], 'v', 'k')
if h[2] ~= 'v' or tonumber(h[1]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
rpush(KEYS[2], ARGV, 3, #ARGV)
rpush(KEYS[3], offsets(ARGV, 3, #ARGV, 0), 1, #ARGV - 2, true)
redis.call('HSET', KEYS[1], 'k', 'l', 's', ARGV[2], 'n', #ARGV - 2, 'b', 0)
redis.call('HDEL', KEYS[1], 'd')
return 1
"""
)
"""KEYS: header, items, offsets. ARGV: version read, size, item... . Swaps a value stored whole for a
Redis list of its items, only if its version is still the one read; the version and value stay."""

# ---------------------------------------------------------------- reads

_LIVE = """
-- version, kind and fields of a key's hash, kind nil when absent, deleted or expired.
local function live(header, ...)
  local f = redis.call('HMGET', header, 'v', 'k', 'e', ...)
  if f[2] == 'd' or (f[3] and tonumber(f[3]) <= now()) then return tonumber(f[1]), nil, f end
  return tonumber(f[1]), f[2], f
end
"""

READ = (
    _CLOCK
    + _LIVE
    + """
local version, kind, f = live(KEYS[1], 'd')
if not version then return {} end
if not kind then return {version, 'd'} end
local data = f[4]
if kind == 'l' then data = '[' .. table.concat(redis.call('LRANGE', KEYS[2], 0, -1), ',') .. ']' end
return {version, kind, data, f[3] or ''}
"""
)
"""KEYS: header, items. ``{}`` (no key), ``{version, 'd'}`` (tombstone or expired) or
``{version, kind, JSON, expires_at or ''}``."""

PART = (
    _CLOCK
    + _LIVE
    + """
local version, kind, f = live(KEYS[1], 'n', 'd')
if not kind then return {} end
if kind == 'v' then return {'v', version, f[5]} end
local out = {'l', version, tonumber(f[4])}
for _, item in ipairs(redis.call('LRANGE', KEYS[2], ARGV[1], ARGV[2])) do out[#out + 1] = item end
return out
"""
)
"""KEYS: header, items. ARGV: LRANGE start, stop. ``{}`` when absent; ``{'v', version, value}`` for a
value stored whole (Python splits it, or refuses it as not a list); ``{'l', version, length, item...}``."""

KEYS_PAGE = (
    _CLOCK
    + """
local out, low, limit = {}, ARGV[1], tonumber(ARGV[3])
while true do
  local names = redis.call('ZRANGEBYLEX', KEYS[1], low, ARGV[2], 'LIMIT', 0, limit)
  for _, name in ipairs(names) do
    local f = redis.call('HMGET', ARGV[4] .. name, 'v', 'k', 'e')
    if f[1] and f[2] ~= 'd' and (not f[3] or tonumber(f[3]) > now()) then
      out[#out + 1] = name
      out[#out + 1] = f[1]
      if #out == 2 * limit then return out end
    end
  end
  if #names < limit then return out end
  low = '(' .. names[#names]
end
"""
)
"""KEYS: index. ARGV: min, max, limit, header name base. ``key, version, ...`` of live keys, skipping
expired ones the sweep has not reached (the index holds every key that is not a tombstone). It reads
keys it could not name in advance: while a cluster moves the slot, Redis refuses one already moved
("non local key"), never a short page."""

# ---------------------------------------------------------------- whole-store and namespace work

SWEEP = (
    _CLOCK
    + _HELPERS
    + """
local count = 0
for i = 1, #ARGV do
  local at = 1 + 4 * (i - 1)
  local header = KEYS[at + 1]
  local f = redis.call('HMGET', header, 'k', 'e')
  local e = tonumber(f[2])
  if e and e <= now() and (f[1] == 'v' or f[1] == 'l') then
    bury(KEYS[1], header, KEYS[at + 2], KEYS[at + 3], KEYS[at + 4], ARGV[i])
    count = count + 1
  elseif e and f[1] ~= 'd' then
    redis.call('ZADD', KEYS[1], e, header)
  else
    redis.call('ZREM', KEYS[1], header)
  end
end
return count
"""
)
"""KEYS: expiry set, then per key: header, items, offsets, index. ARGV: the keys. Tombstones those still
expired (a write may have moved or cleared the expiry since they were found); how many."""

DROP = (
    _HELPERS
    + """
local names = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1)
for _, name in ipairs(names) do  -- while a cluster moves the slot, Redis refuses a key moved already:
  redis.call('EXISTS', ARGV[1] .. name)  -- here, before anything is written
end
for _, name in ipairs(names) do
  bury(KEYS[2], ARGV[1] .. name, ARGV[2] .. name, ARGV[3] .. name, KEYS[1], name)
end
return #names
"""
)
"""KEYS: index, expiry set. ARGV: header, items and offsets name bases, batch. Tombstones one batch of
the namespace's keys (names derived in the namespace's own hash slot), or none while a cluster moves
the slot."""

RESTORE = (
    _HELPERS
    + """
bury(KEYS[5], KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])
redis.call('HSET', KEYS[1], 'v', ARGV[2])
if ARGV[3] == 'd' then return 1 end
redis.call('HSET', KEYS[1], 'k', 'v', 'd', ARGV[4])
redis.call('ZADD', KEYS[4], 0, ARGV[1])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'e', ARGV[5])
  redis.call('ZADD', KEYS[5], ARGV[5], KEYS[1])
end
return 1
"""
)
"""KEYS: header, items, offsets, index, expiry set. ARGV: key, version, kind ('v' or 'd'), value,
expires_at (''). Writes a record exactly as exported."""
