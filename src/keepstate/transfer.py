"""Export and import: every record of a store as JSON lines, between any two persistent stores.

A dump is a header line, then the platform's rows table by table (environments, keys as hashes,
sessions, runs, invocations), then every state key with its version (tombstones too, so versions
keep never repeating after an import). Values travel as their stored canonical JSON, embedded
without re-encoding. Import keeps rows the target already has (``ON CONFLICT DO NOTHING``) and
writes state keys exactly as exported, versions included.

Redis holds state only (no platform), so its dumps and imports carry state lines alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import orjson

from . import values
from .stores import capabilities_of, open_database
from .stores.base import Database, PlatformFacet, StateFacet
from .stores.dump import TABLES
from .stores.records import StateRecord

FORMAT, VERSION = "keepstate-export", 1
Tick = Callable[[str], None]


async def _open(url: str) -> tuple[Database, StateFacet, PlatformFacet | None]:
    """The store's Database, its state facet, and its platform facet where it has one."""
    if not capabilities_of(url).shared:
        raise ValueError("memory:// lives and dies with one process: export and import need a persistent store")
    database = open_database(url)
    try:
        state = await database.state()
        repo = await database.platform() if database.capabilities.platform else None
    except BaseException:
        await database.aclose()
        raise
    return database, state, repo


async def export_lines(url: str, tick: Tick | None = None) -> AsyncIterator[bytes]:
    """The dump of the store at ``url``, one JSON line (without newline) at a time."""
    database, backend, repo = await _open(url)
    try:
        yield orjson.dumps({"type": FORMAT, "version": VERSION, "platform": repo is not None})
        for table in TABLES if repo is not None else ():
            for row in await repo.dump(table):  # type: ignore[union-attr]
                yield orjson.dumps({"type": "row", "table": table, "row": row})
                _tick(tick, table)
        async for record in backend.records():
            yield _state_line(record)
            _tick(tick, "state")
    finally:
        await database.aclose()


async def import_lines(url: str, lines: Iterable[bytes | str], tick: Tick | None = None) -> dict[str, int]:
    """Load a dump into the store at ``url``; return how many records of each kind were read."""
    database, backend, repo = await _open(url)
    counts: dict[str, int] = {}
    try:
        batch: list[dict[str, Any]] = []
        batch_table = ""
        for number, line in enumerate(lines, 1):
            record = _parse(line, number)
            if record is None:
                continue
            kind = record["table"] if record["type"] == "row" else record["type"]
            if batch and kind != batch_table:
                await _load(repo, batch_table, batch)
                batch = []
            if record["type"] == "row":
                batch.append(record["row"])
                batch_table = kind
                if len(batch) >= 500:
                    await _load(repo, batch_table, batch)
                    batch = []
            elif record["type"] == "state":
                await backend.restore(_state_record(record))
            counts[kind] = counts.get(kind, 0) + 1
            _tick(tick, kind)
        if batch:
            await _load(repo, batch_table, batch)
    finally:
        await database.aclose()
    return counts


def _parse(line: bytes | str, number: int) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"line {number} is not JSON: {error}") from None
    kind = record.get("type") if isinstance(record, dict) else None
    if kind == FORMAT:
        if record.get("version") != VERSION:
            raise ValueError(f"dump format version {record.get('version')} is not {VERSION}")
        return None
    if kind not in ("row", "state"):
        raise ValueError(f"line {number}: unknown record type {kind!r}")
    checked: dict[str, Any] = record
    return checked


async def _load(repo: PlatformFacet | None, table: str, rows: list[dict[str, Any]]) -> None:
    if repo is None:
        raise ValueError("this store holds state only (redis://): the dump's platform rows have nowhere to go")
    await repo.load(table, rows)


def _state_line(record: StateRecord) -> bytes:
    value = None if record.data is None else orjson.Fragment(record.data)
    return orjson.dumps(
        {"type": "state", "ns": record.ns, "key": record.key, "version": record.version,
         "deleted": record.data is None, "value": value}
    )


def _state_record(record: dict[str, Any]) -> StateRecord:
    data = None if record.get("deleted") else values.encode(record["value"])
    return StateRecord(str(record["ns"]), str(record["key"]), int(record["version"]), data)


def _tick(tick: Tick | None, kind: str) -> None:
    if tick is not None:
        tick(kind)
