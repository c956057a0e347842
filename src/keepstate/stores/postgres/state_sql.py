"""The PostgreSQL text of the state facet: its schema steps and every statement it sends.

Conventions: the header row is always aliased ``k``; ``NOW`` is the database clock in ms, read in
the statement (``clock_timestamp``), so expiry never depends on the clocks of the servers; a
header is *live* when it is not a tombstone and its ``expires_at`` has not passed.

The one-statement writes follow two patterns. An upsert (``INSERT … ON CONFLICT DO UPDATE … WHERE
guard``) re-checks its guard on the newest row version after waiting for the row lock, so the guard
is a true compare-and-set. Writes that must read segment rows to compute the header (trim, pop)
read them in the statement's snapshot (``cur``) and update the header only if its version is still
the one of that snapshot (``k.version = cur.version``): every transaction that changes a list's
segments holds its header's row lock and bumps its version or makes it a tombstone, so a header that
passes is one whose segments the snapshot saw. A statement that returns no row wrote nothing; the caller then
takes the locked path (``state_ops``), which decides with the header locked.
"""

from __future__ import annotations

from ...values import MAX_VALUE_BYTES
from .db import version_guard

SEGMENT_BYTES = 1800
"""A segment's weight (its items' bytes + 4 per item for ``lens``) stays under this while appended into,
so its row stays in the table page (PostgreSQL TOASTs rows past ~2 KiB)."""

# ---------------------------------------------------------------- schema (append-only steps)

STEPS = (
    """
    CREATE TABLE state_keys (
        ns      TEXT COLLATE "C" NOT NULL,
        key     TEXT COLLATE "C" NOT NULL,
        version BIGINT NOT NULL,
        kind    TEXT NOT NULL CHECK (kind IN ('v', 'l', 'd')),
        data    BYTEA,
        size    INTEGER NOT NULL DEFAULT 0,
        length  INTEGER NOT NULL DEFAULT 0,
        segs    INTEGER NOT NULL DEFAULT 0,
        tail    INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (ns, key)
    );
    CREATE TABLE state_segments (
        ns    TEXT COLLATE "C" NOT NULL,
        key   TEXT COLLATE "C" NOT NULL,
        seg   INTEGER NOT NULL,
        items BYTEA NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (ns, key, seg)
    );
    """,
    # v2: expiry, and lists read in part. A segment is keyed by ``pos``, the absolute position of its
    # first item (one index serves every lookup, so no plan can pick a worse one); ``lens`` holds its
    # items' byte lengths (NULL for segments written before v2: split by parsing, filled when cut). A
    # header's ``base`` is the absolute position of its first item, ``tail_pos`` its tail segment's.
    # Existing segments get their positions from their counts, in their old order.
    """
    ALTER TABLE state_keys ADD COLUMN base BIGINT NOT NULL DEFAULT 0, ADD COLUMN tail_pos BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN expires_at BIGINT;
    CREATE INDEX state_keys_expiry ON state_keys (expires_at) WHERE expires_at IS NOT NULL;
    ALTER TABLE state_segments ADD COLUMN pos BIGINT, ADD COLUMN lens INTEGER[];
    UPDATE state_segments s SET pos = p.pos FROM (
        SELECT ns, key, seg, sum(count) OVER (PARTITION BY ns, key ORDER BY seg) - count AS pos FROM state_segments
    ) p WHERE s.ns = p.ns AND s.key = p.key AND s.seg = p.seg;
    UPDATE state_keys k SET tail_pos = s.pos FROM state_segments s
        WHERE s.ns = k.ns AND s.key = k.key AND s.seg = k.segs;
    ALTER TABLE state_segments DROP CONSTRAINT state_segments_pkey;
    ALTER TABLE state_segments ALTER COLUMN pos SET NOT NULL, DROP COLUMN seg, ADD PRIMARY KEY (ns, key, pos);
    ALTER TABLE state_keys DROP COLUMN segs;
    """,
    # v3: no write takes a version past the highest one (``records.version_limit``)
    version_guard("state_keys"),
)

# ---------------------------------------------------------------- fragments

NOW = "floor(extract(epoch from clock_timestamp()) * 1000)::bigint"
"""Floored, as ``keepstate.clock.now_ms`` is (a bare ``::bigint`` cast would round to the nearest ms)."""
EXPIRED = f"(k.expires_at IS NOT NULL AND k.expires_at <= {NOW})"
LIVE = f"(k.expires_at IS NULL OR k.expires_at > {NOW})"
_EXPIRES = f"{NOW} + %(ttl)s::bigint"
"""A write's new expiry: ``ttl`` from now, NULL without a ttl."""
_CLEAR = "data = NULL, size = 0, length = 0, tail = 0, tail_pos = 0, base = 0, expires_at = NULL"
_IF_VERSION = "(%(if_version)s::bigint IS NULL OR k.version = %(if_version)s)"
_WHERE_KEY = "ns = %(ns)s AND key = %(key)s"
_K_KEY = "k.ns = %(ns)s AND k.key = %(key)s"
_S_KEY = "s.ns = %(ns)s AND s.key = %(key)s"
_COMMA = "'\\x2c'::bytea"

_LIST_DATA = f"""CASE WHEN k.kind = 'l' THEN (
        SELECT string_agg(s.items, {_COMMA} ORDER BY s.pos) FROM state_segments s
        WHERE s.ns = k.ns AND s.key = k.key) END"""

# ---------------------------------------------------------------- reads

GET = f"""SELECT k.version, k.kind, k.data, {_LIST_DATA}, k.expires_at FROM state_keys k
    WHERE k.ns = %s AND k.key = %s AND k.kind <> 'd' AND {LIVE}"""

GET_WITH = f"""SELECT ({{scalar}}), k.version, k.kind, k.data, {_LIST_DATA}, k.expires_at FROM (SELECT 1) AS one
    LEFT JOIN state_keys k ON k.ns = %s AND k.key = %s AND k.kind <> 'd' AND {LIVE}"""


def _part(first: str, end: str, most: str) -> str:
    """A live header with the segments holding its items ``first`` … ``end - 1`` (from 0): one row per
    segment (none for a value), from the one holding ``first``, found by the ``pos`` index; at most
    ``most`` of them (each holds one of the items at least)."""
    return f"""SELECT k.version, k.kind, CASE WHEN k.kind = 'v' AND substring(k.data FOR 1) = '\\x5b'::bytea
            THEN k.data END, k.length, k.base, s.pos, s.items, s.lens
        FROM state_keys k LEFT JOIN LATERAL (
            SELECT s.pos, s.items, s.lens FROM state_segments s
            WHERE k.kind = 'l' AND s.ns = k.ns AND s.key = k.key AND s.pos < k.base + {end}
              AND s.pos >= coalesce((SELECT f.pos FROM state_segments f WHERE f.ns = k.ns AND f.key = k.key
                                     AND f.pos <= k.base + {first} ORDER BY f.pos DESC LIMIT 1), 0)
            ORDER BY s.pos LIMIT {most}) s ON true
        WHERE k.ns = %(ns)s AND k.key = %(key)s AND k.kind <> 'd' AND {LIVE}
        ORDER BY s.pos"""


TAIL = _part("greatest(k.length - %(n)s, 0)", "k.length", "%(n)s")
ITEMS = _part("%(start)s", "%(start)s + %(limit)s", "%(limit)s")

KEYS = f"""SELECT k.key, k.version FROM state_keys k
    WHERE k.ns = %s AND k.kind <> 'd' AND {LIVE} AND k.key > %s AND k.key >= %s AND k.key < %s
    ORDER BY k.key LIMIT %s"""

EXPORT = f"""SELECT k.ns, k.key, k.version, CASE WHEN {LIVE} THEN k.kind ELSE 'd' END, k.data, {_LIST_DATA},
        k.expires_at FROM state_keys k
    WHERE (k.ns, k.key) > (%s, %s) AND k.version > 0 ORDER BY k.ns, k.key LIMIT %s"""

# ---------------------------------------------------------------- one-statement writes

PUT_ANY = f"""INSERT INTO state_keys AS k (ns, key, version, kind, data, expires_at)
    VALUES (%(ns)s, %(key)s, 1, 'v', %(data)s, {_EXPIRES})
    ON CONFLICT (ns, key) DO UPDATE SET version = k.version + 1, kind = 'v', data = excluded.data,
        expires_at = excluded.expires_at
    WHERE k.kind <> 'l' RETURNING k.version"""

PUT_IF_ABSENT = f"""INSERT INTO state_keys AS k (ns, key, version, kind, data, expires_at)
    VALUES (%(ns)s, %(key)s, 1, 'v', %(data)s, {_EXPIRES})
    ON CONFLICT (ns, key) DO UPDATE SET version = k.version + 1, kind = 'v', data = excluded.data,
        expires_at = excluded.expires_at
    WHERE k.kind = 'd' OR (k.kind = 'v' AND {EXPIRED}) RETURNING k.version"""

PUT_IF_VERSION = f"""UPDATE state_keys k SET version = k.version + 1, data = %(data)s, expires_at = {_EXPIRES}
    WHERE {_K_KEY} AND k.kind = 'v' AND k.version = %(if_version)s AND {LIVE} RETURNING k.version"""

DELETE_VALUE = f"""UPDATE state_keys k SET kind = 'd', {_CLEAR}
    WHERE {_K_KEY} AND k.kind = 'v' AND {LIVE} AND {_IF_VERSION} RETURNING k.version"""

# An append adds its items as chunks (``Chunks``): one chunk goes into the tail segment while that stays
# under SEGMENT_BYTES, else (and always for several chunks) each chunk is a new segment, at the absolute
# position of its first item. Either way the header's new ``tail_pos`` is where the last chunk lands, and
# chunk i lands at ``tail_pos - last_offset + offset_i``. The size guard returns no row when the list
# would pass the limit; so does a value or an expired list (whose segments the locked path deletes).
_NEW_SIZE = "CASE WHEN k.kind = 'd' OR k.length = 0 THEN excluded.size ELSE k.size + excluded.size - 1 END"
_FRESH = "%(chunks)s > 1 OR k.kind = 'd' OR k.length = 0 OR k.tail + 1 + excluded.tail > %(seg_bytes)s"
_CHUNKS = "unnest(%(payloads)s::bytea[], %(counts)s::int4[], %(offsets)s::int4[]) AS u(items, n, off)"
_CHUNK_LENS = "(%(lens)s::int4[])[u.off + 1 : u.off + u.n]"
APPEND = f"""WITH h AS (
    INSERT INTO state_keys AS k (ns, key, version, kind, size, length, tail, tail_pos, expires_at)
    VALUES (%(ns)s, %(key)s, 1, 'l', %(size)s, %(count)s, %(last_weight)s, %(last_offset)s, {_EXPIRES})
    ON CONFLICT (ns, key) DO UPDATE SET
        version = k.version + 1, kind = 'l', data = NULL, size = {_NEW_SIZE},
        length = CASE WHEN k.kind = 'd' THEN 0 ELSE k.length END + excluded.length,
        base = CASE WHEN k.kind = 'd' THEN 0 ELSE k.base END,
        tail = CASE WHEN {_FRESH} THEN excluded.tail ELSE k.tail + 1 + excluded.tail END,
        tail_pos = CASE WHEN NOT ({_FRESH}) THEN k.tail_pos WHEN k.kind = 'd' THEN excluded.tail_pos
                        ELSE k.base + k.length + excluded.tail_pos END,
        expires_at = coalesce(excluded.expires_at, k.expires_at)
    WHERE (k.kind = 'd' OR (k.kind = 'l' AND {LIVE})) AND {_NEW_SIZE} <= {MAX_VALUE_BYTES}
    RETURNING k.version, k.length, k.tail_pos
), s AS (
    INSERT INTO state_segments AS s (ns, key, pos, items, count, lens)
    SELECT %(ns)s, %(key)s, h.tail_pos - %(last_offset)s + u.off, u.items, u.n, {_CHUNK_LENS}
    FROM h, {_CHUNKS}
    ON CONFLICT (ns, key, pos) DO UPDATE SET items = s.items || {_COMMA} || excluded.items,
        count = s.count + excluded.count, lens = CASE WHEN s.lens IS NULL THEN NULL ELSE s.lens || excluded.lens END
)
SELECT version, length FROM h"""

# incr: the stored integer (0 when absent; NULL, failing the guard, for anything else) plus ``by``, in
# numeric so that leaving signed 64-bit fails the guard instead of raising.
_DEAD = f"(k.kind = 'd' OR (k.kind = 'v' AND {EXPIRED}))"
_INTEGER = "(k.kind = 'v' AND octet_length(k.data) <= 20 AND convert_from(k.data, 'UTF8') ~ '^-?(0|[1-9][0-9]*)$')"
_SUM = f"(CASE WHEN {_DEAD} THEN 0 WHEN {_INTEGER} THEN convert_from(k.data, 'UTF8')::numeric END + %(by)s::numeric)"
_IN_RANGE = f"{_SUM} BETWEEN {-(2**63)} AND {2**63 - 1}"
_INCR_SET = f"""version = k.version + 1, kind = 'v', data = convert_to({_SUM}::text, 'UTF8'),
        expires_at = coalesce({_EXPIRES}, CASE WHEN {_DEAD} THEN NULL ELSE k.expires_at END)"""
_INCR_UPSERT = f"""INSERT INTO state_keys AS k (ns, key, version, kind, data, expires_at)
    VALUES (%(ns)s, %(key)s, 1, 'v', %(first)s, {_EXPIRES})
    ON CONFLICT (ns, key) DO UPDATE SET {_INCR_SET}
    WHERE {{guard}} RETURNING k.data, k.version"""
INCR_ANY = _INCR_UPSERT.format(guard=_IN_RANGE)
INCR_IF_ABSENT = _INCR_UPSERT.format(guard=_DEAD)
INCR_IF_VERSION = f"""UPDATE state_keys k SET {_INCR_SET}
    WHERE {_K_KEY} AND k.kind = 'v' AND k.version = %(if_version)s AND {LIVE} AND {_IN_RANGE}
    RETURNING k.data, k.version"""

# trim: whole segments below the cut deleted, the one holding the first kept item rewritten without its
# dropped items (it needs ``lens``). ``d`` is how many items go, ``dropped`` their bytes.
TRIM = f"""WITH cur AS (
    SELECT k.version, k.length, k.base, greatest(k.length - %(keep)s, 0) AS d FROM state_keys k
    WHERE {_K_KEY} AND k.kind = 'l' AND {LIVE} AND {_IF_VERSION}
), cut AS (
    SELECT s.pos, s.lens, (cur.base + cur.d - s.pos)::int AS skip FROM cur CROSS JOIN LATERAL (
        SELECT pos, lens FROM state_segments WHERE {_WHERE_KEY} AND pos <= cur.base + cur.d
        ORDER BY pos DESC LIMIT 1) s
    WHERE cur.d > 0 AND cur.d < cur.length
), bound AS (
    SELECT coalesce((SELECT pos FROM cut), cur.base + cur.d) AS pos FROM cur
), dropped AS (
    SELECT coalesce((SELECT sum(octet_length(s.items) - s.count + 1) FROM state_segments s
                     WHERE {_S_KEY} AND s.pos < (SELECT pos FROM bound)), 0)
         + coalesce((SELECT sum(x) FROM cut, unnest(cut.lens[1:cut.skip]) x), 0) AS bytes
), h AS (
    UPDATE state_keys k SET version = k.version + 1, length = k.length - cur.d,
        size = CASE WHEN cur.d = k.length THEN 2 ELSE k.size - dropped.bytes - cur.d END,
        base = CASE WHEN cur.d = k.length THEN 0 ELSE k.base + cur.d END,
        tail = CASE WHEN cur.d = k.length THEN 0 ELSE k.tail END,
        tail_pos = CASE WHEN cur.d = k.length THEN 0 WHEN k.tail_pos = (SELECT pos FROM cut)
                        THEN k.tail_pos + (SELECT skip FROM cut) ELSE k.tail_pos END,
        expires_at = coalesce({_EXPIRES}, k.expires_at)
    FROM cur, dropped
    WHERE {_K_KEY} AND k.version = cur.version AND k.kind = 'l' AND {LIVE}
      AND NOT EXISTS (SELECT 1 FROM cut WHERE cut.skip > 0 AND cut.lens IS NULL)
    RETURNING k.version, k.length
), gone AS (
    DELETE FROM state_segments s WHERE {_S_KEY} AND s.pos < (SELECT pos FROM bound) AND EXISTS (SELECT FROM h)
), rewritten AS (
    UPDATE state_segments s SET pos = s.pos + cut.skip, count = s.count - cut.skip, lens = s.lens[cut.skip + 1:],
        items = substring(s.items FROM ((SELECT sum(x) FROM unnest(s.lens[1:cut.skip]) x) + cut.skip + 1)::int)
    FROM cut WHERE {_S_KEY} AND s.pos = (SELECT pos FROM cut WHERE skip > 0) AND EXISTS (SELECT FROM h)
)
SELECT version, length FROM h"""

# pop: the last item cut off the last segment (it needs ``lens``), the segment deleted when it held only that;
# the segment before it (``prev``: its position and weight) is then the header's tail.
POP = f"""WITH cur AS (
    SELECT k.version, s.pos, s.count, s.lens[s.count] AS last,
        substring(s.items FROM octet_length(s.items) - s.lens[s.count] + 1) AS item,
        CASE WHEN s.count = 1 THEN (SELECT ARRAY[p.pos, octet_length(p.items) + 4 * p.count] FROM state_segments p
            WHERE p.ns = %(ns)s AND p.key = %(key)s AND p.pos < s.pos ORDER BY p.pos DESC LIMIT 1) END AS prev
    FROM state_keys k CROSS JOIN LATERAL (
        SELECT pos, count, lens, items FROM state_segments WHERE {_WHERE_KEY} ORDER BY pos DESC LIMIT 1) s
    WHERE {_K_KEY} AND k.kind = 'l' AND {LIVE} AND k.length > 0 AND s.lens IS NOT NULL AND {_IF_VERSION}
), h AS (
    UPDATE state_keys k SET version = k.version + 1, length = k.length - 1,
        size = CASE WHEN k.length = 1 THEN 2 ELSE k.size - cur.last - 1 END,
        tail_pos = CASE WHEN k.length = 1 THEN 0 WHEN cur.count = 1 THEN cur.prev[1] ELSE k.tail_pos END,
        tail = CASE WHEN k.length = 1 THEN 0 WHEN cur.count = 1 THEN cur.prev[2]
                    ELSE greatest(k.tail - cur.last - 5, 0) END,
        base = CASE WHEN k.length = 1 THEN 0 ELSE k.base END
    FROM cur WHERE {_K_KEY} AND k.version = cur.version AND k.kind = 'l' AND {LIVE}
    RETURNING k.version, k.length
), gone AS (
    DELETE FROM state_segments s
    WHERE {_S_KEY} AND s.pos = (SELECT pos FROM cur WHERE count = 1) AND EXISTS (SELECT FROM h)
), shrunk AS (
    UPDATE state_segments s SET items = substring(s.items FOR octet_length(s.items) - cur.last - 1),
        lens = s.lens[1:s.count - 1], count = s.count - 1
    FROM cur WHERE {_S_KEY} AND s.pos = (SELECT pos FROM cur WHERE count > 1) AND EXISTS (SELECT FROM h)
)
SELECT cur.item, h.version, h.length FROM h, cur"""

# ---------------------------------------------------------------- the locked path (header row held)

ENSURE_ROW = "INSERT INTO state_keys (ns, key, version, kind) VALUES (%s, %s, 0, 'd') ON CONFLICT (ns, key) DO NOTHING"
LOCK = f"""SELECT k.version, k.kind, CASE WHEN k.kind = 'v' THEN k.data END, {EXPIRED}, k.size, k.length, k.base
    FROM state_keys k WHERE k.ns = %s AND k.key = %s FOR UPDATE"""
LIST_DATA = f"SELECT {_LIST_DATA} FROM state_keys k WHERE k.ns = %s AND k.key = %s"

TOMBSTONE = f"""WITH gone AS (DELETE FROM state_segments WHERE {_WHERE_KEY})
    UPDATE state_keys SET kind = 'd', {_CLEAR} WHERE {_WHERE_KEY}"""
WRITE_VALUE = f"""WITH gone AS (DELETE FROM state_segments WHERE {_WHERE_KEY})
    UPDATE state_keys k SET version = k.version + 1, kind = 'v', data = %(data)s, size = 0, length = 0, tail = 0,
        tail_pos = 0, base = 0, expires_at = coalesce({_EXPIRES}, CASE WHEN %(keep)s THEN k.expires_at END)
    WHERE {_K_KEY} RETURNING k.version"""
TOUCH_LIST = f"""UPDATE state_keys k SET version = k.version + 1, kind = 'l',
    size = CASE WHEN k.kind = 'd' THEN 2 ELSE k.size END, expires_at = coalesce({_EXPIRES}, k.expires_at)
    WHERE {_K_KEY} RETURNING k.version, k.length"""
TO_LIST = f"""UPDATE state_keys SET kind = 'l', data = NULL, size = %(size)s, length = %(count)s,
    tail = %(last_weight)s, tail_pos = %(last_offset)s, base = 0 WHERE {_WHERE_KEY}"""
SEGMENTS = f"""INSERT INTO state_segments (ns, key, pos, items, count, lens)
    SELECT %(ns)s, %(key)s, %(at)s + u.off, u.items, u.n, {_CHUNK_LENS} FROM {_CHUNKS}"""
OLD_SEGMENT_AT = f"""SELECT pos, items FROM state_segments
    WHERE {_WHERE_KEY} AND pos = (SELECT max(pos) FROM state_segments WHERE {_WHERE_KEY} AND pos <= %(at)s)
      AND lens IS NULL"""
DELETE_SEGMENT = f"DELETE FROM state_segments WHERE {_WHERE_KEY} AND pos = %(at)s"
RETAIL = f"""UPDATE state_keys SET tail = %(last_weight)s, tail_pos = %(at)s + %(last_offset)s
    WHERE {_WHERE_KEY} AND tail_pos = %(at)s"""

# ---------------------------------------------------------------- many keys

LOCK_MANY = """INSERT INTO state_keys (ns, key, version, kind)
    SELECT u.ns, u.key, 0, 'd' FROM unnest(%(nss)s::text[], %(keys)s::text[]) AS u(ns, key)
    ORDER BY u.ns COLLATE "C", u.key COLLATE "C" ON CONFLICT (ns, key) DO NOTHING"""
LOCK_ORDERED = """SELECT 1 FROM state_keys k WHERE (k.ns, k.key) IN (
        SELECT u.ns COLLATE "C", u.key COLLATE "C" FROM unnest(%(nss)s::text[], %(keys)s::text[]) AS u(ns, key))
    ORDER BY k.ns, k.key FOR UPDATE"""

DROP = f"""WITH locked AS (
    SELECT key FROM state_keys WHERE ns = %(ns)s AND kind <> 'd' ORDER BY key FOR UPDATE
), h AS (
    UPDATE state_keys k SET kind = 'd', {_CLEAR} FROM locked WHERE k.ns = %(ns)s AND k.key = locked.key RETURNING k.key
), gone AS (
    DELETE FROM state_segments s USING h WHERE s.ns = %(ns)s AND s.key = h.key
)
SELECT count(*) FROM h"""

COPY = f"""INSERT INTO state_keys AS k (ns, key, version, kind, data, size, length, base, tail, tail_pos, expires_at)
    SELECT %(target)s, s.key, s.version, s.kind, s.data, s.size, s.length, s.base, s.tail, s.tail_pos, s.expires_at
    FROM state_keys s WHERE s.ns = %(source)s AND s.kind <> 'd' AND (s.expires_at IS NULL OR s.expires_at > {NOW})
    ON CONFLICT (ns, key) DO UPDATE SET version = greatest(excluded.version, k.version + 1), kind = excluded.kind,
        data = excluded.data, size = excluded.size, length = excluded.length, base = excluded.base,
        tail = excluded.tail, tail_pos = excluded.tail_pos, expires_at = excluded.expires_at"""
"""A namespace's live headers into another (emptied first), each version kept above the target row's own."""
COPY_SEGMENTS = """INSERT INTO state_segments (ns, key, pos, items, count, lens)
    SELECT k.ns, s.key, s.pos, s.items, s.count, s.lens FROM state_segments s
    JOIN state_keys k ON k.ns = %(target)s AND k.key = s.key AND k.kind = 'l' WHERE s.ns = %(source)s"""
"""The segments of the lists ``COPY`` just wrote (the target was emptied first, so it holds no others)."""

SWEEP = f"""WITH due AS (
    SELECT ns, key FROM state_keys WHERE expires_at IS NOT NULL AND expires_at <= (SELECT {NOW})
    ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED
), h AS (
    UPDATE state_keys k SET kind = 'd', {_CLEAR} FROM due WHERE k.ns = due.ns AND k.key = due.key RETURNING k.ns, k.key
), gone AS (
    DELETE FROM state_segments s USING h WHERE s.ns = h.ns AND s.key = h.key
)
SELECT count(*) FROM h"""

RESTORE = f"""WITH gone AS (DELETE FROM state_segments WHERE {_WHERE_KEY})
    INSERT INTO state_keys AS k (ns, key, version, kind, data, expires_at)
    VALUES (%(ns)s, %(key)s, %(version)s, %(kind)s, %(data)s, %(expires_at)s)
    ON CONFLICT (ns, key) DO UPDATE SET version = excluded.version, kind = excluded.kind, data = excluded.data,
        size = 0, length = 0, tail = 0, tail_pos = 0, base = 0, expires_at = excluded.expires_at"""
