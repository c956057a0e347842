"""Export and import: every record of a store as JSON lines, between any two persistent stores.

A dump is a header line, then the platform's rows table by table (environments, keys as hashes,
sessions, runs, invocations, the runs' events), then every state key with its version (tombstones too, so versions
keep never repeating after an import), then every memory document (space, path, version, text,
metadata, last write; deleted ones as tombstones, for the same reason), then every session-store
record (session state and retained tokens: space, id, version, expiry, bytes as base64; expired ones
too, until the purge takes them), then an end line with the number of records. Leases are not moved:
a lease of the old store means nothing in the new one, and a new lease row's fence starts above any
token the old store gave. Values and metadata travel as their stored canonical JSON, embedded without
re-encoding. Import keeps rows the target already has (``ON CONFLICT DO NOTHING``) and writes state
keys and documents exactly as exported, versions included; the target's search index takes each
document in as it is written.

Import reads and checks the whole dump before it opens the target, spooling it (in memory, then
on disk) for the second pass that writes: an empty input, a line that is not a record, or a dump
cut short (no end line: an interrupted export) is refused with its line number, and nothing is
written. Format versions 1 (before the end line), 2 (before documents), 3 (before session-store
records), 4 (before a session's ``parent``, the session it was forked from) and 5 (before run events)
are still read; a keepstate reading only those refuses a version 6 dump by its header, before writing
anything. A run of a dump before 6 arrives with the events of its status, as the store's step 8 gives
the runs it finds (``stores/sql/events.py``).

Redis holds state and session stores only (no platform, no memory), so its dumps and imports carry
those lines alone.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import orjson

from . import values
from .errors import KeepstateError
from .platform.memory import View, check_metadata, check_text, document_path, space_of
from .scope import check_namespace, check_version
from .stores import capabilities_of, dump, open_database
from .stores.base import LEASE_SPACES, Database, DocumentsFacet, LeaseFacet, PlatformFacet, StateFacet, redact
from .stores.documents import DocumentRecord
from .stores.records import Blob, BlobRecord, StateRecord

FORMAT, VERSION = "keepstate-export", 6
READABLE = (1, 2, 3, 4, 5, 6)
"""Format versions import reads: 1 has no end line, 2 no documents, 3 no session-store records, 4 no
session ``parent`` (its sessions import with none), 5 no run events (its runs get their status's)."""
SPOOL_BYTES = 16 * 1024 * 1024
BATCH_ROWS = 500
YIELD_EVERY = 1000
Tick = Callable[[str], None]


class BadDump(ValueError):
    """The input of an import is not a whole dump; the message names the line."""


@dataclass(frozen=True, slots=True)
class Opened:
    """A store opened for a transfer: its Database and facets, None for those it lacks (Redis)."""

    database: Database
    state: StateFacet
    platform: PlatformFacet | None
    documents: DocumentsFacet | None
    leases: dict[str, LeaseFacet]


async def _open(url: str) -> Opened:
    if not capabilities_of(url).shared:
        raise ValueError(f"{redact(url)} lives and dies with one process: export and import need a persistent store")
    database = open_database(url)
    try:
        state = await database.state()
        repo = await database.platform() if database.capabilities.platform else None
        documents = await database.documents() if database.capabilities.documents else None
        spaces = LEASE_SPACES if database.capabilities.leases else ()
        leases = {space: await database.leases(space) for space in spaces}
    except BaseException:
        await database.aclose()
        raise
    return Opened(database, state, repo, documents, leases)


async def export_lines(url: str, tick: Tick | None = None) -> AsyncIterator[bytes]:
    """The dump of the store at ``url``, one JSON line (without newline) at a time."""
    store = await _open(url)
    repo, records = store.platform, 0
    try:
        yield orjson.dumps({"type": FORMAT, "version": VERSION, "platform": repo is not None})
        for table in dump.TABLES if repo is not None else ():
            for row in await repo.dump(table):  # type: ignore[union-attr]
                yield orjson.dumps({"type": "row", "table": table, "row": row})
                records = await _counted(records, tick, table)
        async for record in store.state.records():
            yield _state_line(record)
            records = await _counted(records, tick, "state")
        if store.documents is not None:
            async for document in store.documents.records():
                yield _document_line(document)
                records = await _counted(records, tick, "document")
        for space, leases in store.leases.items():
            async for blob in leases.records():
                yield _session_line(space, blob)
                records = await _counted(records, tick, "session")
        yield orjson.dumps({"type": FORMAT, "end": True, "records": records})
    finally:
        await store.database.aclose()


def read_dump(lines: Iterable[bytes | str], tick: Tick | None = None) -> CheckedDump:
    """Read and check a whole dump, spooled for ``load_dump``; close it when done.

    Synchronous on purpose: reading standard input blocks, and Ctrl-C must stop it.
    Raises ``BadDump``, naming the line, for input that is not a whole dump."""
    checked = CheckedDump()
    try:
        checked.read(lines, tick)
    except BadDump as error:
        checked.close()
        raise BadDump(f"nothing imported: {error}") from None
    except BaseException:
        checked.close()
        raise
    return checked


async def load_dump(url: str, checked: CheckedDump, tick: Tick | None = None) -> dict[str, int]:
    """Write a checked dump into the store at ``url``; return how many records of each kind it held."""
    store = await _open(url)
    try:
        if store.platform is None and set(checked.counts) - {"state", "session"}:
            raise ValueError(
                f"{redact(url)} holds state and session stores only: the dump's platform rows and memory "
                "documents have nowhere to go"
            )
        await _load_all(store, checked.records(), tick)
    finally:
        await store.database.aclose()
    return checked.counts


async def import_lines(url: str, lines: Iterable[bytes | str], tick: Tick | None = None) -> dict[str, int]:
    """``read_dump`` then ``load_dump``: nothing is written unless the whole input is a dump."""
    with read_dump(lines) as checked:
        return await load_dump(url, checked, tick)


class CheckedDump:
    """A dump read once and checked line by line, kept (in memory, then on disk) for the pass that writes it."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
        self._version: int | None = None
        self._ended = False
        self._records = 0
        self.counts: dict[str, int] = {}

    def __enter__(self) -> CheckedDump:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def read(self, lines: Iterable[bytes | str], tick: Tick | None = None) -> None:
        number = 0
        try:
            for number, line in enumerate(lines, 1):
                raw = line.encode() if isinstance(line, str) else line
                kind = self._check(raw, number)
                if kind is not None:
                    self.counts[kind] = self.counts.get(kind, 0) + 1
                    _tick(tick, kind)
                self._file.write(raw.rstrip(b"\r\n") + b"\n")
        except OSError as error:
            raise BadDump(f"cannot read the dump after line {number}: {error.strerror or error}") from None
        self._finish(number)

    def records(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each row or state record with its line number, in the dump's order."""
        self._file.seek(0)
        for number, line in enumerate(self._file, 1):
            if line.strip():
                record = orjson.loads(line)
                if record["type"] != FORMAT:
                    yield number, record

    def _check(self, line: bytes, number: int) -> str | None:
        """The kind of record on this line (a table name or ``state``), None for blank and framing lines."""
        if not line.strip():
            return None
        record = _parse(line, number)
        if self._version is None:
            self._version = _header_version(record, number)
            return None
        if self._ended:
            raise BadDump(f"line {number} comes after the dump's end line")
        if record.get("type") not in (FORMAT, "row", "state", "document", "session"):
            raise BadDump(f"line {number}: unknown record type {record.get('type')!r}")
        if record["type"] == FORMAT:
            self._end(record, number)
            return None
        self._records += 1
        return _check_record(record, number)

    def _end(self, record: dict[str, Any], number: int) -> None:
        if record.get("end") is not True or record.get("records") != self._records:
            raise BadDump(
                f"line {number}: an end line for {record.get('records')!r} records, "
                f"after {self._records}: the dump is damaged"
            )
        self._ended = True

    def _finish(self, lines: int) -> None:
        if self._version is None:
            raise BadDump("the input is empty: expected a dump written by keepstate export")
        if self._version >= 2 and not self._ended:
            raise BadDump(
                f"the dump stops at line {lines} without its end line: it is incomplete (was the export interrupted?)"
            )


def _parse(line: bytes, number: int) -> dict[str, Any]:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise BadDump(f"line {number} is not JSON: {error}") from None
    if not isinstance(record, dict):
        raise BadDump(f"line {number} is not a JSON object")
    checked: dict[str, Any] = record
    return checked


def _header_version(record: dict[str, Any], number: int) -> int:
    version = record.get("version")
    if record.get("type") != FORMAT or "end" in record:
        raise BadDump(f"line {number} is not the header of a dump: is the input the output of keepstate export?")
    if version not in READABLE:
        raise BadDump(f"dump format version {version!r} is not one this keepstate reads ({READABLE})")
    readable: int = version
    return readable


def _check_record(record: dict[str, Any], number: int) -> str:
    """Refuse a row or state record this version could not write, naming its line."""
    try:
        if record["type"] == "state":
            _state_record(record)
            return "state"
        if record["type"] == "document":
            _document_record(record)
            return "document"
        if record["type"] == "session":
            _session_record(record)
            return "session"
        row, table = record["row"], record["table"]
        dump.check_table(table, [])
        if not isinstance(row, dict) or not row:
            raise ValueError("a row is an object of columns")
        dump.check_table(table, list(row))
        dump.decode_row(row)
        return str(table)
    except (KeyError, TypeError, ValueError, KeepstateError) as error:
        raise BadDump(f"line {number}: a bad {record['type']} record{_named(record)}: {_reason(error)}") from None


def _named(record: dict[str, Any]) -> str:
    """Which record it is, as far as the line says: `` (ns …, key …)`` or `` (space …, path …)``."""
    fields = ("ns", "key") if record["type"] == "state" else ("space", "path") if record["type"] == "document" else ()
    named = [f"{field} {str(record[field])[:80]!r}" for field in fields if field in record]
    return f" ({', '.join(named)})" if named else ""


def _reason(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"no {error.args[0]!r}"
    return error.message if isinstance(error, KeepstateError) else str(error)


async def _load_all(store: Opened, records: Iterator[tuple[int, dict[str, Any]]], tick: Tick | None) -> None:
    """Write the records in order, platform rows in batches of one table."""
    rows = _Rows(store.platform)
    for number, record in records:
        if record["type"] == "state":
            await rows.flush()
            await store.state.restore(_state_record(record))
            _tick(tick, "state")
        elif record["type"] == "session":
            await rows.flush()
            space, blob = _session_record(record)
            if space not in store.leases:
                store.database.capabilities.require("leases", store.database.url)
            await store.leases[space].restore(blob)
            _tick(tick, "session")
        elif record["type"] == "document":
            await rows.flush()
            if store.documents is None:
                store.database.capabilities.require("documents", store.database.url)
            assert store.documents is not None
            await store.documents.restore(_document_record(record))
            _tick(tick, "document")
        else:
            await rows.add(number, record["table"], record["row"])
            _tick(tick, record["table"])
    await rows.flush()


class _Rows:
    """Platform rows waiting to be loaded together: up to ``BATCH_ROWS`` of one table."""

    def __init__(self, repo: PlatformFacet | None) -> None:
        self._repo = repo
        self._table = ""
        self._rows: list[dict[str, Any]] = []
        self._first = 0

    async def add(self, number: int, table: str, row: dict[str, Any]) -> None:
        if self._rows and (table != self._table or len(self._rows) >= BATCH_ROWS):
            await self.flush()
        if not self._rows:
            self._table, self._first = table, number
        self._rows.append(row)

    async def flush(self) -> None:
        """Load the waiting rows. A refusal by the database (a column it lacks, a missing value)
        names the lines; what came before them is already written, and importing again keeps it."""
        if not self._rows or self._repo is None:
            return
        rows, self._rows = self._rows, []
        try:
            await self._repo.load(self._table, rows)
        except KeepstateError:
            raise
        except Exception as error:  # a driver's refusal of the rows: the repositories do not translate it
            last = self._first + len(rows) - 1
            raise BadDump(
                f"import stopped: lines {self._first}-{last} ({self._table}) were refused by the store: "
                f"{error}; the records before them are imported"
            ) from error


def _state_line(record: StateRecord) -> bytes:
    value = None if record.data is None else orjson.Fragment(record.data)
    return orjson.dumps(
        {
            "type": "state",
            "ns": record.ns,
            "key": record.key,
            "version": record.version,
            "deleted": record.data is None,
            "value": value,
        }
    )


def _state_record(record: dict[str, Any]) -> StateRecord:
    """A dump's state line, checked by the rules of a write (a scope's namespace, a key of the key
    charset, a version a store can hold, a value within the value rules), so an import never writes
    what a write could not."""
    ns, key, version, deleted = record["ns"], record["key"], record["version"], record["deleted"]
    if not isinstance(deleted, bool):
        raise TypeError("deleted is true or false")
    check_namespace(ns)
    values.check_key(key)
    check_version(version)
    data = None if deleted else values.encode(record["value"])
    if data is not None:
        values.check_size(len(data))
    return StateRecord(ns, key, version, data)


def _document_line(record: DocumentRecord) -> bytes:
    metadata = None if record.deleted else orjson.Fragment(record.metadata)
    return orjson.dumps(
        {
            "type": "document",
            "space": record.space,
            "path": record.path,
            "version": record.version,
            "deleted": record.deleted,
            "text": record.text,
            "metadata": metadata,
            "updated_at": record.updated_at,
        }
    )


def _document_record(record: dict[str, Any]) -> DocumentRecord:
    """A dump's document line, checked by memory's own rules (a space ``env/agent``, a stored path,
    text and metadata within their limits) so an import never writes what a write could not."""
    space, path, version, deleted = record["space"], record["path"], record["version"], record["deleted"]
    updated_at = record["updated_at"]
    if not (isinstance(space, str) and isinstance(path, str) and isinstance(deleted, bool)):
        raise TypeError("space and path are strings, deleted is true or false")
    env, _, agent = space.partition("/")
    if space != space_of(env, agent):
        raise ValueError(f"space {space[:80]!r} is not env/agent")
    if document_path(View(space, every_folder=True), path) != path:
        raise ValueError(f"path {path[:80]!r} is not a stored path")
    check_version(version)
    if not _is_count(updated_at):
        raise ValueError(f"updated_at {updated_at!r} is a time in milliseconds, an integer from 0")
    if deleted:
        return DocumentRecord(space, path, version, None, b"{}", updated_at)
    return DocumentRecord(
        space, path, version, check_text(record["text"]), check_metadata(record["metadata"]), updated_at
    )


def _session_line(space: str, record: BlobRecord) -> bytes:
    blob = record.blob
    return orjson.dumps(
        {
            "type": "session",
            "space": space,
            "id": record.id,
            "version": blob.version,
            "expires_at": blob.expires_at,
            "pinned": blob.pinned,
            "data": base64.b64encode(blob.data).decode("ascii"),
        }
    )


def _session_record(record: dict[str, Any]) -> tuple[str, BlobRecord]:
    """A dump's session-store line, checked: a space of the store's leases, an id an embedded store
    (a key) or a server (``env/space/id``, its state a JSON object up to 1 MiB) could have written."""
    space, id, version, expires_at, pinned = (
        record[name] for name in ("space", "id", "version", "expires_at", "pinned")
    )
    if space not in LEASE_SPACES or not isinstance(id, str) or not isinstance(pinned, bool):
        raise ValueError(f"space is one of {LEASE_SPACES}, id a string and pinned true or false")
    parts = id.split("/")
    if len(parts) not in (1, 3) or not all(values.is_key(part) for part in parts):
        raise ValueError(f"id {id[:80]!r} is neither a key nor env/space/id")
    if not _is_count(version, 1) or not (expires_at is None or _is_count(expires_at, 0)):
        raise ValueError(f"version {version!r} and expires_at {expires_at!r} are integers, from 1 and from 0")
    try:
        data = base64.b64decode(record["data"], validate=True)
    except (binascii.Error, TypeError) as error:
        raise ValueError(f"data is not base64: {error}") from None
    if len(parts) == 3:
        if not isinstance(values.parse(data), dict):
            raise ValueError("a served session's state is a JSON object")
        values.check_size(len(data), "state")
    return space, BlobRecord(id, Blob(data, expires_at, pinned, version))


def _is_count(number: object, least: int = 0) -> bool:
    return isinstance(number, int) and not isinstance(number, bool) and least <= number <= values.INT64_MAX


async def _counted(records: int, tick: Tick | None, kind: str) -> int:
    """One more record exported. Every ``YIELD_EVERY`` records the event loop gets a turn, so that a
    cancel (Ctrl-C under ``asyncio.run``) stops an export whose reads never wait."""
    _tick(tick, kind)
    if records % YIELD_EVERY == 0:
        await asyncio.sleep(0)
    return records + 1


def _tick(tick: Tick | None, kind: str) -> None:
    if tick is not None:
        tick(kind)
