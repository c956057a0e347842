"""The state facet on Redis: every write one run of one Lua script, so keys change atomically.

Layout, every name starting with the URL's prefix ``P``; a key's names carry the hash tag ``{ns}``:
- ``P{ns}:h:KEY`` — a hash per key: ``v`` version, ``k`` kind (``v`` value, ``l`` list kept as a
  Redis list, ``d`` tombstone keeping the last version, so versions never repeat), ``d`` a value's
  canonical JSON bytes, ``s``/``n``/``b`` a list's size in bytes, length and base offset, ``e`` the
  expiry (ms since the epoch, by Redis's clock);
- ``P{ns}:l:KEY`` — a list's items, one Redis list element of item JSON each: an append is an RPUSH,
  ``tail``/``items`` an LRANGE, ``pop`` removes the last, ``trim`` an LTRIM; none of them costs the
  list's length (Redis keeps a list in nodes of a few KiB and skips whole nodes);
- ``P{ns}:o:KEY`` — the items' end offsets, parallel to the items, so that a trim knows the size of
  what stays from one element at the cut (``state_lua`` says how);
- ``P{ns}:keys`` — a sorted set of the keys that are not tombstones, all at score 0, so ``keys()``
  pages them in byte order with ZRANGEBYLEX (skipping expired ones not yet swept);
- ``Pexpiry`` — one sorted set of every key with an expiry (member: its hash's name, score: when it
  expires), so ``sweep`` finds expired keys without a scan. On a Redis Cluster, one such set per hash
  slot instead, ``P{TAG}:expiry`` with the slot's own tag (``slots.slot_tag``), so that it shares the
  slot of the keys it lists.
- ``Ponce:CALLER:KEY`` — an idempotency key's record (``write_once``: the request's fingerprint, the
  write's results), written by the write's own script and expiring a day later; on a cluster
  ``P{ns}:once:CALLER:KEY``, in the slot of the scope written.

Every write (a single call or a batch of up to 100) is one run of the engine script
(``state_lua.WRITE``), which checks every op before it writes anything — except a lone ``put``,
``append`` or ``incr`` on a key in the usual layout, which runs a short script of its own
(``single_lua``: same answers, same layout, half the Redis time) that hands any other key to the
engine. On one Redis a batch spans namespaces freely. A cluster runs a script only when its keys
share a hash slot: one scope's keys always do, so every single call is one atomic script there too,
and a batch whose scopes fall in several slots is refused before anything is sent
(``Names.check_batch``; the store declares no ``cross_scope_batches``).

A value stored by ``put`` that is a JSON list stays one string (its GET is one HMGET) and becomes a
Redis list on its first append, trim or pop: Python splits it and a script swaps it in only if the
version is still the one read; ``tail``/``items`` of such a value parse it whole (at most 1 MiB).
Lists written before offsets existed get them on their first append or trim, inside the script.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from ...clock import now_ms
from ...errors import InvalidRequest, KeepstateError, NotAList, NotAnInteger, VersionConflict
from ..base import StateFacet
from ..lists import check_append, split_list
from ..numbers import add_checked
from ..records import (
    VERSION_LIMIT,
    WRITES,
    BatchOp,
    Entry,
    ListPage,
    StateRecord,
    prefix_end,
    unknown_write,
    version_limit,
)
from ..remembered import KEEP_MS, Answer, Memo, Remembered
from . import single_lua
from . import state_lua as lua
from .db import Client, Script, translate_errors
from .slots import SLOTS, slot_of, slot_tag

if TYPE_CHECKING:
    from collections.abc import Iterable

DROP_BATCH = 500
EXPORT_BATCH = 500
SWEEP_SETS = 1024
"""Expiry sets a sweep reads in one pipeline (a cluster has one per slot)."""
ROUNDS = 1000
"""Runs of the engine one call may take: one more per patch of a batch, and a retry whenever another
writer changed a patched key or a stored list had to be split first."""
SIGNALS = (b"conflict", b"error", b"engine", b"replayed")
"""The first word of a short script's answer when it is not the write's result (``single_lua``)."""
LIST_OPS = ("append", "trim")
VALUE_OPS = ("incr", "patch")
"""Ops that read a value's bytes: the engine reads them with the key's header, in one HMGET."""


# ---------------------------------------------------------------- key naming (pure)


class Names:
    """Redis key names for one store prefix; on a Redis Cluster (``cluster``: the store's URL, for
    messages) the keys with an expiry are listed in one set per hash slot."""

    def __init__(self, prefix: str, cluster: str | None = None) -> None:
        self.prefix = prefix
        self.expiry = prefix + "expiry"
        self.cluster = cluster

    def expiry_of(self, ns: str) -> str:
        """The expiry set that lists the keys of ``ns`` (in their slot, on a cluster)."""
        return self.expiry if self.cluster is None else self._slot_expiry(self.slot(ns))

    def expiry_sets(self) -> list[str]:
        """Every expiry set there may be: one, or one per slot on a cluster."""
        return [self.expiry] if self.cluster is None else [self._slot_expiry(slot) for slot in range(SLOTS)]

    def _slot_expiry(self, slot: int) -> str:
        return f"{self.prefix}{{{slot_tag(slot)}}}:expiry"

    def slot(self, ns: str) -> int:
        """The cluster hash slot of every key of ``ns``."""
        return slot_of(self.index(ns))

    def check_batch(self, ops: Sequence[BatchOp]) -> None:
        """On a cluster, refuse a batch whose scopes are not all in one hash slot, before anything is sent:
        no script may span slots there, and two scripts would not be one atomic write."""
        if self.cluster is None or not ops:
            return
        first = self.slot(ops[0].ns)
        for index, op in enumerate(ops):
            if self.slot(op.ns) != first:
                raise InvalidRequest(
                    f"the store {self.cluster} is a Redis Cluster, where a batch is atomic only within one hash "
                    f"slot: {ops[0].ns!r} (slot {first}) and {op.ns!r} (slot {self.slot(op.ns)}) are in two; "
                    "write each scope in a batch of its own, or keep cross-scope batches on redis://, "
                    "postgresql:// or sqlite:///",
                    index=index,
                )

    def base(self, ns: str, part: str) -> str:
        return f"{self.prefix}{{{ns}}}:{part}:"

    def of(self, ns: str, key: str) -> list[str]:
        """The header, items, offsets and index names of one key, as the scripts take them."""
        return [self.base(ns, "h") + key, self.base(ns, "l") + key, self.base(ns, "o") + key, self.index(ns)]

    def index(self, ns: str) -> str:
        return f"{self.prefix}{{{ns}}}:keys"

    def record(self, ns: str, caller: str, key: str) -> str:
        """An idempotency key's record: the store's own on one Redis; on a cluster in the slot of the scope
        it writes (a script reaches one slot), so there a key is the scope's own."""
        where = self.prefix if self.cluster is None else f"{self.prefix}{{{ns}}}:"
        return f"{where}once:{caller}:{key}"

    def head(self, ns: str, key: str) -> list[str]:
        """The header and index names of one key: what every short script takes first."""
        tagged = f"{self.prefix}{{{ns}}}:"
        return [tagged + "h:" + key, tagged + "keys"]

    def header_pattern(self) -> str:
        escaped = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix)
        return escaped + "{*}:h:*"

    def parse_header(self, name: bytes) -> tuple[str, str]:
        """(ns, key) of a header name ``P{ns}:h:key``."""
        rest = name.decode()[len(self.prefix) + 1 :]
        ns, _, key = rest.partition("}:h:")
        return ns, key


def lex_bounds(prefix: str, after: str) -> tuple[str, str]:
    """ZRANGEBYLEX bounds for keys ``> after`` that start with ``prefix``."""
    low = "(" + after if after and after >= prefix else "[" + prefix if prefix else "-"
    return low, ("(" + prefix_end(prefix) if prefix else "+")


def window(start: int, limit: int) -> tuple[int, int]:
    """LRANGE bounds of items ``start`` … ``start + limit - 1`` (an empty range for no items)."""
    return (start, start + limit - 1) if limit > 0 else (1, 0)


def _arg(number: int | None) -> str | int:
    return "" if number is None else number


def _guard(if_version: int | None, ttl_ms: int | None) -> str:
    """A short script's ``if_version`` and ttl in one argument: ``''`` for neither (the usual call)."""
    return "" if if_version is None and ttl_ms is None else f"{_arg(if_version)} {_arg(ttl_ms)}"


# ---------------------------------------------------------------- the engine's ops (pure)

Patched = tuple[str, bytes]
"""A patch computed in Python: the SHA-1 of the value it was computed from ('' for absent), the result."""


def _listed_later(ops: Sequence[BatchOp], index: int) -> bool:
    """Does a later op append to or trim this op's key? (Then a list it writes goes in as items.)"""
    op = ops[index]
    return any(o.op in LIST_OPS and (o.ns, o.key) == (op.ns, op.key) for o in ops[index + 1 :])


def _op_args(ops: Sequence[BatchOp], index: int, patched: Patched | None) -> tuple[str, list[Any]]:
    """The engine's code and arguments of one op."""
    op = ops[index]
    if op.op == "put":
        if op.data.startswith(b"[") and _listed_later(ops, index):
            return "putl", split_list(op.data)
        return "put", [op.data]
    if op.op == "append":
        return "append", list(op.items)
    if op.op == "incr":
        return "incr", [str(op.by)]
    if op.op == "trim":
        return "trim", [str(op.keep_last)]
    if op.op == "patch" and patched is not None:
        sha, data = patched
        if data.startswith(b"[") and _listed_later(ops, index):
            return "patch", [sha, "l", *split_list(data)]
        return "patch", [sha, "v", data]
    return op.op, []  # delete, pop, a patch still to compute


def _answer(op: BatchOp, reply: Any, patched: Patched | None) -> Any:
    """One op's answer, as the facet's method of that op returns it."""
    if op.op == "put":
        return int(reply)
    if op.op == "delete":
        return bool(reply)
    if op.op == "incr":
        return int(reply[0]), int(reply[1])
    if op.op == "patch":
        assert patched is not None
        return patched[1], int(reply)
    if op.op == "pop":
        return None if reply is None else (reply[0], int(reply[1]), int(reply[2]))
    return int(reply[0]), int(reply[1])  # append, trim


def _refuse(op: BatchOp, code: bytes, detail: Any) -> None:
    """Raise the error the engine reported for ``op``, worded as the memory reference words it."""
    if code == b"not_a_list":
        raise NotAList(f"{op.key!r} holds a value that is not a list")
    if code == b"too_large":
        check_append(int(detail))
    if code == b"overflow":
        add_checked(int(detail), op.by)
    if code == b"not_an_integer":
        raise NotAnInteger("incr needs an integer value, and this key holds something else")
    if code == VERSION_LIMIT.encode():
        raise version_limit()
    raise AssertionError(f"the engine refused {op.op} with {code!r} ({detail!r})")


def _located(error: KeepstateError, index: int | None) -> KeepstateError:
    """A batch's error names the op that caused it; a single call's stays as it is."""
    if index is None:
        return error
    return type(error)(error.message, **{**error.details, "index": index})


def _conflict(ops: Sequence[BatchOp], flat: list[Any], batch: bool) -> VersionConflict:
    found = [(int(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2)]
    if not batch:
        return VersionConflict(current_version=found[0][1])
    conflicts = [
        {"index": index, "ns": ops[index].ns, "key": ops[index].key, "current_version": current}
        for index, current in found
    ]
    return VersionConflict(current_version=found[0][1], conflicts=conflicts)


def _sha(data: bytes | None) -> str:
    return "" if data is None else hashlib.sha1(data).hexdigest()


def _entry(found: list[Any]) -> Entry | None:
    if len(found) < 4:
        return None
    return Entry(found[2], int(found[0]), int(found[3]) if found[3] else None)


def _record(ns: str, key: str, found: list[Any]) -> StateRecord:
    entry = _entry(found)
    if entry is None:
        return StateRecord(ns, key, int(found[0]), None)
    return StateRecord(ns, key, entry.version, entry.data, entry.expires_at)


class Once:
    """An idempotent write's record (its Redis name) and memo, as the engine's once-run takes them."""

    __slots__ = ("memo", "record")

    def __init__(self, record: str, memo: Memo) -> None:
        self.record, self.memo = record, memo

    @property
    def args(self) -> list[Any]:
        return [self.memo.fingerprint, KEEP_MS]

    def replayed(self, op: BatchOp, fingerprint: bytes, results: list[Any], value: bytes | None) -> Remembered:
        """The key's record as its ``Remembered``: rendered by the memo when it is the same request (else
        only its fingerprint matters: a mismatch)."""
        if fingerprint != self.memo.fingerprint:
            return Remembered(fingerprint, Answer(0, b""))
        answer = self.memo.render(_answer(op, results[0], (_sha(None), value or b"") if op.op == "patch" else None))
        assert answer is not None, "a kept result is a write's"
        return Remembered(fingerprint, answer)


# ---------------------------------------------------------------- the facet


class RedisState(StateFacet):
    """The state facet on one Redis (its keys under the URL's prefix)."""

    def __init__(self, client: Client, names: Names) -> None:
        self.client = client
        self.names = names
        self._write = Script(client, lua.WRITE)
        self._write_once = Script(client, lua.ONCE_WRITE)
        self._convert = Script(client, lua.CONVERT)
        self._read = Script(client, lua.READ)
        self._part = Script(client, lua.PART)
        self._keys = Script(client, lua.KEYS_PAGE)
        self._sweep = Script(client, lua.SWEEP)
        self._drop = Script(client, lua.DROP)
        self._restore = Script(client, lua.RESTORE)
        self._plain = {kind: Script(client, text) for kind, text in single_lua.PLAIN.items()}
        self._once = {kind: Script(client, text) for kind, text in single_lua.ONCE.items()}

    # -- writes: a short script for the commonest alone, else one run of the engine

    async def write(self, op: BatchOp) -> Any:
        """A lone put, append or incr by its short script (``single_lua``), every other write by the engine."""
        short = self._short(op)
        if short is None:
            if op.op not in WRITES:
                raise unknown_write(op)
            return await self._one(op)
        kind, keys, args = short
        return _answer(op, await self._single(self._plain[kind], keys, args, op), None)

    async def _one(self, op: BatchOp) -> Any:
        """One op by the engine."""
        return (await self._run([op], batch=False))[0]

    async def write_once(self, op: BatchOp, memo: Memo) -> Any:
        """``op`` applied once per ``memo``'s key: the script that writes it keeps its result in the key's
        record (``Names.record``, expiring after ``KEEP_MS``); a repeat gets that record as the key's
        ``Remembered`` and writes nothing. The short scripts and the engine alike (``state_lua.ONCE``)."""
        once = Once(self.names.record(op.ns, memo.caller, memo.key), memo)
        short = self._short(op)
        if short is None:
            return (await self._run([op], batch=False, once=once))[0]
        kind, keys, args = short
        found = await self._single(self._once[kind], [*keys, once.record], [*args, *once.args], op, once)
        return found if isinstance(found, Remembered) else _answer(op, found, None)

    def _short(self, op: BatchOp) -> tuple[str, list[str], list[Any]] | None:
        """A put's, append's or incr's short script (by kind), KEYS and ARGV; None for the engine's ops."""
        names, ns, key = self.names, op.ns, op.key
        if op.op == "put":
            keys = [*names.head(ns, key), names.expiry_of(ns)]
            return "put", keys, [key, _guard(op.if_version, op.ttl_ms), op.data]
        if op.op == "append":
            keys = [*names.head(ns, key), names.base(ns, "l") + key, names.base(ns, "o") + key]
            if op.ttl_ms is not None:  # the expiry set changes only with a ttl: otherwise one key less to send
                keys.append(names.expiry_of(ns))
            return "append", keys, [key, _guard(None, op.ttl_ms), *op.items]
        if op.op == "incr":
            keys = [*names.head(ns, key), names.expiry_of(ns)]
            return "incr", keys, [key, _guard(op.if_version, op.ttl_ms), str(op.by)]
        return None

    async def batch(self, ops: Sequence[BatchOp]) -> list[Any]:
        """One run of the engine for every op, across namespaces (within one slot on a cluster, see above)."""
        self.names.check_batch(ops)
        return await self._run(ops, batch=True)

    async def _single(
        self, script: Script, keys: list[str], args: list[Any], op: BatchOp, once: Once | None = None
    ) -> Any:
        """One put, append or incr by its short script (``single_lua``), answered as the engine's
        answer to that op alone; by the engine itself when the script hands the key over. ``once``: the
        script is the op's once-variant, its key's record last in ``keys`` (``write_once``)."""
        with translate_errors():
            reply = await script(keys=keys, args=args)
        if not isinstance(reply, list) or reply[0] not in SIGNALS:
            return reply
        if reply[0] == b"conflict":
            raise VersionConflict(current_version=int(reply[1]))
        if reply[0] == b"error":
            _refuse(op, reply[1], reply[2] if len(reply) > 2 else None)
        if reply[0] == b"replayed":
            assert once is not None
            return once.replayed(op, *reply[1:])
        return await self._one(op) if once is None else (await self._run([op], batch=False, once=once))[0]

    async def _run(self, ops: Sequence[BatchOp], batch: bool, once: Once | None = None) -> list[Any]:
        """Run the engine until it answers: splitting stored lists and computing patches it asks for
        (``once``: the one op's idempotency record, its kept answer the run's ``Remembered``)."""
        patched: dict[int, Patched] = {}
        for _ in range(ROUNDS):
            keys, args, places = self._encode(ops, patched)
            with translate_errors():
                if once is None:
                    reply = await self._write(keys=keys, args=args)
                else:
                    reply = await self._write_once(keys=[*keys, once.record], args=[*args, *once.args])
            signal, rest = reply[0], reply[1:]
            if signal == b"replayed":
                assert once is not None
                return [once.replayed(ops[0], *rest)]
            if signal == b"ok":
                return [
                    _answer(op, answer, patched.get(i)) for i, (op, answer) in enumerate(zip(ops, rest, strict=True))
                ]
            if signal == b"conflict":
                raise _conflict(ops, rest, batch)
            if signal == b"error":
                self._fail(ops, rest, batch)
            elif signal == b"need":
                patched[rest[0]] = self._patch(ops, rest[0], rest[1], batch)
            elif signal == b"stale":
                patched = {index: done for index, done in patched.items() if index < rest[0]}
            else:  # convert
                await self._to_list(self.names.of(*places[int(rest[0]) - 1]))
        raise VersionConflict(f"{ops[0].key!r} kept changing while this write was retried {ROUNDS} times")

    def _encode(self, ops: Sequence[BatchOp], patched: dict[int, Patched]) -> tuple[list[str], list[Any], list[Any]]:
        """The engine's KEYS and ARGV for ``ops``, and the (ns, key) of each key group."""
        groups: dict[tuple[str, str], int] = {}
        wanted = {(op.ns, op.key) for op in ops if op.op in VALUE_OPS}
        keys, args = [self.names.expiry_of(ops[0].ns)], []  # every op's: one Redis, or one slot
        for index, op in enumerate(ops):
            where = (op.ns, op.key)
            if where not in groups:
                groups[where] = len(groups) + 1
                keys += self.names.of(op.ns, op.key)
            code, extra = _op_args(ops, index, patched.get(index))
            want = "d" if where in wanted else ""
            args += [
                f"{code} {groups[where]} {_arg(op.if_version)} {_arg(op.ttl_ms)} {len(extra)} {want}",
                op.key,
                *extra,
            ]
        return keys, args, list(groups)

    @staticmethod
    def _fail(ops: Sequence[BatchOp], rest: list[Any], batch: bool) -> None:
        index = int(rest[0])
        try:
            _refuse(ops[index], rest[1], rest[2] if len(rest) > 2 else None)
        except KeepstateError as error:
            raise _located(error, index if batch else None) from None

    @staticmethod
    def _patch(ops: Sequence[BatchOp], index: int, current: bytes | None, batch: bool) -> Patched:
        patcher = ops[index].patcher
        assert patcher is not None
        try:
            return _sha(current), patcher(current)
        except KeepstateError as error:
            raise _located(error, index if batch else None) from None

    async def _to_list(self, names: list[str]) -> None:
        """Swap a stored JSON list for a Redis list, only if its version is unchanged (else: again)."""
        with translate_errors():
            found: list[Any] = await self.client.hmget(names[0], ["v", "k", "d"])
            version, kind, data = found
            if kind == b"v" and data.startswith(b"["):
                await self._convert(keys=names[:3], args=[int(version), len(data), *split_list(data)])

    # -- reads

    async def get(self, ns: str, key: str) -> Entry | None:
        """One HMGET for a value without expiry (the usual case); the READ script, which judges expiry
        by Redis's clock and joins a list's items, for the rest."""
        names = self.names.of(ns, key)
        with translate_errors():
            found: list[Any] = await self.client.hmget(names[0], ["v", "k", "d", "e"])
            version, kind, data, expires = found
            if kind == b"v" and expires is None:
                return Entry(data, int(version))
            if kind not in (b"v", b"l"):
                return None
            return _entry(await self._read(keys=names[:2], args=[]))

    async def tail(self, ns: str, key: str, n: int) -> ListPage | None:
        return await self._list_part(ns, key, *((-n, -1) if n > 0 else window(0, 0)))

    async def items(self, ns: str, key: str, start: int, limit: int) -> ListPage | None:
        return await self._list_part(ns, key, *window(start, limit))

    async def _list_part(self, ns: str, key: str, start: int, stop: int) -> ListPage | None:
        """Items ``start`` … ``stop`` (LRANGE indexes) of a list; a value stored whole is parsed."""
        with translate_errors():
            found = await self._part(keys=self.names.of(ns, key)[:2], args=[start, stop])
        if not found:
            return None
        if found[0] == b"l":
            return ListPage(found[3:], int(found[1]), int(found[2]))
        if not found[2].startswith(b"["):
            raise NotAList(f"{key!r} holds a value that is not a list")
        items = split_list(found[2])
        return ListPage(items[start : None if stop == -1 else stop + 1], int(found[1]), len(items))

    async def keys(self, ns: str, prefix: str = "", after: str = "", limit: int = 100) -> list[tuple[str, int]]:
        low, high = lex_bounds(prefix, after)
        with translate_errors():
            flat = await self._keys(keys=[self.names.index(ns)], args=[low, high, limit, self.names.base(ns, "h")])
        return [(flat[i].decode(), int(flat[i + 1])) for i in range(0, len(flat), 2)]

    # -- whole namespaces and stores

    async def drop(self, ns: str) -> None:
        """Tombstone every key of ``ns``, one atomic batch of keys at a time."""
        bases = [self.names.base(ns, part) for part in "hlo"]
        keys = [self.names.index(ns), self.names.expiry_of(ns)]
        with translate_errors():
            while await self._drop(keys=keys, args=[*bases, DROP_BATCH]) == DROP_BATCH:
                pass

    async def sweep(self, limit: int = 1000) -> int:
        """Tombstone up to ``limit`` expired keys, found in the expiry sets by this process's clock; the
        burial checks each again by Redis's own, so a key not yet expired there is left for later."""
        swept, wanted = 0, limit
        sets = self.names.expiry_sets()
        for start in range(0, len(sets), SWEEP_SETS):
            for expiry, headers in await self._expired(sets[start : start + SWEEP_SETS], wanted):
                if wanted > 0:
                    swept += await self._bury_expired(expiry, headers[:wanted])
                    wanted -= len(headers)
            if wanted <= 0:
                break
        return swept

    async def _expired(self, sets: list[str], limit: int) -> list[tuple[str, list[bytes]]]:
        """(expiry set, header names) of up to ``limit`` keys per set expired by now, from ``sets``."""
        now = now_ms()
        with translate_errors():
            async with self.client.pipeline(transaction=False) as pipe:
                for expiry in sets:
                    pipe.zrangebyscore(expiry, "-inf", now, start=0, num=limit)
                found: list[list[bytes]] = await pipe.execute()
        return [(expiry, headers) for expiry, headers in zip(sets, found, strict=True) if headers]

    async def _bury_expired(self, expiry: str, headers: Iterable[bytes]) -> int:
        """Tombstone the keys of these header names (all listed in ``expiry``) that are still expired (a
        write may have moved or cleared an expiry since they were found); how many."""
        keys, args = [expiry], []
        for header in headers:
            ns, key = self.names.parse_header(header)
            keys += self.names.of(ns, key)
            args.append(key)
        with translate_errors():
            return int(await self._sweep(keys=keys, args=args))

    async def records(self) -> AsyncIterator[StateRecord]:
        """Every key, tombstones included (an expired key as one), in (namespace, key) order as the SQL
        stores give them: SCAN finds the keys' names in no order, so they are gathered (names only) and
        sorted first, then read a batch at a time."""
        with translate_errors():
            names = [
                name async for name in self.client.scan_iter(match=self.names.header_pattern(), count=EXPORT_BATCH)
            ]
        names.sort(key=self.names.parse_header)
        for start in range(0, len(names), EXPORT_BATCH):
            for record in await self._read_batch(names[start : start + EXPORT_BATCH]):
                yield record

    async def _read_batch(self, headers: list[bytes]) -> list[StateRecord]:
        parsed = [self.names.parse_header(name) for name in headers]
        with translate_errors():
            results = await self._read.pipelined([(self.names.of(ns, key)[:2], []) for ns, key in parsed])
        return [_record(ns, key, found) for (ns, key), found in zip(parsed, results, strict=True) if found]

    async def restore(self, record: StateRecord) -> None:
        kind, data = ("d", b"") if record.data is None else ("v", record.data)
        expires = "" if record.data is None or record.expires_at is None else record.expires_at
        keys = [*self.names.of(record.ns, record.key), self.names.expiry_of(record.ns)]
        with translate_errors():
            await self._restore(keys=keys, args=[record.key, record.version, kind, data, expires])
