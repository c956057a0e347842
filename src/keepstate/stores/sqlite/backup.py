"""A consistent copy of a live SQLite store, taken while servers keep writing to it.

SQLite's online backup (``sqlite3.Connection.backup``) copies every page in **one step**, inside one
read transaction on the source: in WAL mode that transaction is a snapshot, so writers in other
processes go on committing while the copy is made, and the copy holds exactly what was committed
when the step began — every write acknowledged before the backup started, none half-done. (Copied
in several steps, a backup restarts whenever another connection writes, and under steady writes
may never finish.)

The copy is written beside its destination under a temporary name, switched out of WAL (so it is
one self-contained file), opened again read-only and checked — ``PRAGMA integrity_check`` and
keepstate's schema table — and only then renamed into place, with the file and its folder fsynced.
A failed or interrupted backup leaves nothing at the destination.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from pathlib import Path
from urllib.parse import quote

from ...errors import InvalidRequest, Unavailable
from ..records import BackupReport
from .db import BUSY_TIMEOUT_MS, SCHEMA_TABLE, require_store, translate_errors

COMPANIONS = ("", "-wal", "-shm", "-journal")
"""The files a SQLite store is: the database, its write-ahead log, the log's index and a rollback journal.
Replacing any of them under a live store loses or corrupts what it holds (the log holds every write since
the last checkpoint)."""


def backup(source: str, target: str, replace: bool = False) -> BackupReport:
    """Copy the SQLite store at ``source`` to ``target`` and verify the copy.

    Raises NotFound when ``source`` holds no keepstate store, InvalidRequest for a ``target`` that
    exists (unless ``replace``) or is one of the store's files (``COMPANIONS``), Unavailable when
    either file cannot be used or the copy fails its check."""
    require_store(source)
    _check_target(source, target, replace)
    partial = f"{target}.partial-{secrets.token_hex(4)}"
    try:
        _copy(source, partial)
        report = verify(partial)
        _fsync(partial)
        os.replace(partial, target)
        _fsync(os.path.dirname(os.path.abspath(target)))
    except OSError as error:
        raise Unavailable(f"cannot write the backup {target}: {error.strerror or error}") from error
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
    return BackupReport(target, report.bytes, report.pages, report.schema)


def _check_target(source: str, target: str, replace: bool) -> None:
    where = Path(target)
    part = store_file_named(source, where)
    if part is not None:
        raise InvalidRequest(f"the backup {target} is {part}: choose another file")
    if where.is_dir():
        raise InvalidRequest(f"{target} is a directory: name the backup file, such as {where / 'keepstate.db'}")
    if where.exists() and not replace:
        raise InvalidRequest(f"{target} already exists: remove it, choose another file, or pass --force")
    if not where.parent.is_dir():
        raise InvalidRequest(f"there is no directory {where.parent.resolve()} for the backup {target}")


def store_file_named(source: str, target: Path) -> str | None:
    """What ``target`` is of the store at ``source`` (the store itself, or one of its companion files),
    however the path is spelled — relative or absolute, through ``.``/``..`` or symbolic links, or a
    hard link to one of them; None when it is none of them."""
    store = Path(source).resolve()
    resolved = target.resolve()
    for suffix in COMPANIONS:
        part = store.with_name(store.name + suffix)
        if resolved == part or _same_file(target, part):
            return "the store itself" if not suffix else f"the store's {suffix[1:]} file, part of the live store"
    return None


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:  # either is missing: no file to be the same
        return False


def _copy(source: str, partial: str) -> None:
    """The one-step online backup, then the copy made a single file (rollback journal, not WAL)."""
    with translate_errors():
        src = sqlite3.connect(f"file:{quote(source)}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            dst = sqlite3.connect(partial)
            try:
                src.backup(dst, pages=-1)
                dst.execute("PRAGMA journal_mode=DELETE")
            finally:
                dst.close()
        finally:
            src.close()


def verify(path: str) -> BackupReport:
    """Open ``path`` read-only and check it is a whole keepstate store: SQLite's integrity check passes
    and keepstate's schema table names its components. Unavailable when it is not."""
    with translate_errors():
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
        try:
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check").fetchall()]
            if problems != ["ok"]:
                raise Unavailable(f"the copy {path} fails SQLite's integrity check: {'; '.join(problems[:3])}")
            schema = dict(conn.execute(f"SELECT component, version FROM {SCHEMA_TABLE} ORDER BY component"))
            pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        finally:
            conn.close()
    if not schema:
        raise Unavailable(f"the copy {path} holds no keepstate schema")
    return BackupReport(path, os.path.getsize(path), pages, schema)


def _fsync(path: str) -> None:
    """Make a file (or a folder's entry of a renamed file) durable: a backup that a crash can undo is none."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
