"""One SQLite file shared by every part of keepstate in a process: connections, transactions, migrations.

Settings: WAL (readers never block the writer), ``synchronous=FULL`` (a commit is on disk when
it returns), a busy timeout (several processes may share the file), and ``BEGIN IMMEDIATE`` for
every write (take the write lock up front, so a read-then-write cannot deadlock on upgrade).

Sync callers write on their own thread's connection. Async callers (the server) hand writes to
one writer thread that **group-commits**: it runs every write waiting in its queue inside one
transaction, each under its own savepoint, and pays one fsync for all of them. That is how FULL
durability gets near NORMAL throughput, and it keeps the event loop free during fsync.
"""

from __future__ import annotations

import asyncio
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import quote

from ...errors import NotFound, StoreClosed, Unavailable
from ...values import MAX_VERSION
from .. import forks
from ..migrations import pending_steps, split_sql
from ..records import VERSION_LIMIT, version_limit
from ..remembered import ARMED
from . import remembering

T = TypeVar("T")
BUSY_TIMEOUT_MS = 30_000
GROUP_LIMIT = 256
SCHEMA_TABLE = "keepstate_schema"


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` → ``rel.db``; ``sqlite:////abs.db`` → ``/abs.db``."""
    if not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
        raise ValueError(f"not a SQLite store URL: {url!r} (use sqlite:///file.db)")
    return url[len("sqlite:///") :].split("?", 1)[0]


_UNAVAILABLE = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_IOERR",
    "SQLITE_FULL",
    "SQLITE_CANTOPEN",
    "SQLITE_READONLY",
    "SQLITE_CORRUPT",
    "SQLITE_NOTADB",
    "SQLITE_PROTOCOL",
    "SQLITE_PERM",
)


@contextmanager
def translate_errors() -> Iterator[None]:
    """Errors that mean "the file can't be used now" (locked, disk, permissions) become
    Unavailable, a write refused by ``version_guard`` its own error; anything else (a bad statement)
    is a bug and stays what it is."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        name = getattr(error, "sqlite_errorname", "") or ""
        if name.startswith(_UNAVAILABLE) or "unable to open" in str(error):
            raise Unavailable(f"sqlite: {error}") from error
        if isinstance(error, sqlite3.ProgrammingError) and "closed database" in str(error):
            raise StoreClosed() from error  # closed by another thread under this call
        if isinstance(error, sqlite3.IntegrityError) and str(error) == VERSION_LIMIT:
            raise version_limit() from None
        raise


def version_guard(table: str) -> str:
    """A trigger refusing any write that would take a row of ``table`` past ``values.MAX_VERSION``:
    the statement is undone and ``translate_errors`` raises ``records.version_limit``."""
    return (
        f"CREATE TRIGGER {table}_version_limit BEFORE UPDATE OF version ON {table} "
        f"WHEN NEW.version > {MAX_VERSION} BEGIN SELECT RAISE(ABORT, '{VERSION_LIMIT}'); END;"
    )


def connect(path: str, synchronous: str = "FULL") -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN ourselves) with keepstate's settings."""
    with translate_errors():
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        _enter_wal(conn)
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
    return conn


def check_path(path: str, must_exist: bool) -> None:
    """Refuse a path that can never be a store file; with ``must_exist``, one that is not a store yet."""
    if os.path.isdir(path):
        example = os.path.join(path, "keepstate.db")
        raise Unavailable(f"{path} is a directory: a SQLite store is a file, such as {example}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise Unavailable(f"there is no directory {folder} for the SQLite file {path}")
    if must_exist:
        require_store(path)


def require_store(path: str) -> None:
    """Raise ``NotFound`` unless ``path`` is a file holding a keepstate store.

    It only reads, through a read-only connection (no file, table or journal mode is created), so
    that a command which only reads can refuse a store that is not there rather than make one."""
    if not os.path.isfile(path):
        raise NotFound(f"no keepstate store at {path}: the file does not exist")
    with translate_errors():
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
        try:
            query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
            found = conn.execute(query, (SCHEMA_TABLE,)).fetchone()
        finally:
            conn.close()
    if found is None:
        raise NotFound(f"no keepstate store at {path}: the file holds no keepstate tables")


def _enter_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL. Several processes creating one fresh file can get "locked" here at once,
    without SQLite's busy handler being consulted: try again for a while, then give up."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; any exception rolls back and propagates."""
    with translate_errors():
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection, component: str, steps: Sequence[str]) -> None:
    """Apply the steps of ``component`` not yet applied, under the write lock.

    Steps are append-only SQL scripts; step *n* is applied once, in one transaction with the
    record that it was, so two processes opening a fresh file at once apply it exactly once.
    """
    with write_transaction(conn):
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
        )
        row = conn.execute(f"SELECT version FROM {SCHEMA_TABLE} WHERE component = ?", (component,)).fetchone()
        done = row[0] if row else 0
        for version, script in pending_steps(steps, done):
            for statement in split_sql(script, sqlite3.complete_statement):
                conn.execute(statement)
            conn.execute(
                f"INSERT INTO {SCHEMA_TABLE} (component, version) VALUES (?, ?) "
                "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                (component, version),
            )


class SqliteFile:
    """A SQLite file as one process uses it: per-thread connections and one group-commit writer.

    Shared by every ``SqliteDatabase`` of the same file in the process (``acquire``), so the state,
    platform, leases and harness of one file queue their async writes on one writer thread: two
    writers in one process would only contend on the file's lock, unfairly."""

    def __init__(self, path: str, synchronous: str = "FULL") -> None:
        self.path = path
        self.synchronous = synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._writer: _GroupWriter | None = None
        self.users = 0
        self.migrated: set[tuple[str, int]] = set()
        self.connection()  # fail fast on a bad path
        forks.forget_in_child(self, SqliteFile._forget)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, self.synchronous)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def migrate(self, component: str, steps: Sequence[str]) -> None:
        """Apply ``component``'s pending steps, once per process (other processes may too: it is safe)."""
        if (component, len(steps)) not in self.migrated:
            migrate(self.connection(), component, steps)
            self.migrated.add((component, len(steps)))

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction on this thread's connection (``BEGIN IMMEDIATE``)."""
        with write_transaction(self.connection()) as conn:
            yield conn

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in a write transaction on this thread; with an armed memo, its answer too (``awrite``).
        ``write_transaction`` written out: its two generator frames cost a keyed put measurably."""
        fn = remembering.with_answer(fn)
        conn = self.connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.DatabaseError:
            with translate_errors():
                raise
        return result

    def autocommit(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` with no explicit transaction: for one statement, which SQLite makes atomic.

        The error translation is inlined: a ``with`` block costs every call, an ``except`` only a failing one.
        With an armed memo the statement needs a transaction for its answer: ``write``."""
        if ARMED.get() is not None:
            return self.write(fn)
        try:
            return fn(self.connection())
        except sqlite3.DatabaseError:
            with translate_errors():
                raise

    def fetchone(self, query: str, params: tuple[object, ...]) -> Any:
        """The first row of one statement in autocommit, atomic on its own.

        ``autocommit`` without the callable: the server's hot reads (a token's lease, a state
        value) call this once per request, and a closure or partial per call is measurable there."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        try:
            return (conn or self.connection()).execute(query, params).fetchone()
        except sqlite3.DatabaseError:
            with translate_errors():
                raise

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in a read transaction: one consistent snapshot, never blocks the writer."""
        conn = self.connection()
        if conn.in_transaction:  # inside this thread's write transaction: read what it sees
            with translate_errors():
                return fn(conn)
        with translate_errors():
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")

    async def awrite(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in the writer thread, committed together with other waiting writes. While an
        idempotent write's memo is armed (``remembering.py``), its answer is stored with ``fn``."""
        fn = remembering.with_answer(fn)
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = _GroupWriter(connect(self.path, self.synchronous))
        return await self._writer.submit(fn)

    async def aread(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Reads are a few microseconds on a WAL snapshot: run them on the caller's thread."""
        return self.read(fn)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.stop()
            self._writer = None
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()

    def _forget(self) -> None:
        """In a forked child: SQLite connections must not cross a fork, and the writer thread is not here.
        The inherited connections are dropped, never used; each thread opens its own on next use."""
        self._local = threading.local()
        self._all = []
        self._writer = None
        self._lock = threading.Lock()


class _GroupWriter:
    """One thread that owns the write connection and commits queued writes in groups."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._queue: queue.Queue[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]] | None]
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="keepstate-sqlite-writer", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put((fn, future))
        return future

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)
        self._conn.close()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            while len(group) < GROUP_LIMIT:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                group.append(item)
            self._commit(group)

    def _commit(self, group: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]]]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        try:
            with write_transaction(self._conn) as conn:
                for fn, _ in group:
                    outcomes.append(_in_savepoint(conn, fn))
        except Exception as error:  # the group's commit failed: nothing of it is stored
            outcomes = [(False, error)] * len(group)
        for (_, future), (ok, value) in zip(group, outcomes, strict=True):
            future.get_loop().call_soon_threadsafe(_settle, future, ok, value)


def _in_savepoint(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]) -> tuple[bool, Any]:
    """Run one write of a group; its failure undoes only its own changes."""
    conn.execute("SAVEPOINT one")
    try:
        with translate_errors():
            result = fn(conn)
    except Exception as error:
        conn.execute("ROLLBACK TO one")
        conn.execute("RELEASE one")
        return False, error
    conn.execute("RELEASE one")
    return True, result


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


_FILES: dict[str, SqliteFile] = {}
_FILES_LOCK = threading.Lock()


def _fresh_lock_in_child() -> None:
    """A forked child gets a lock no parent thread can have been holding at the fork."""
    global _FILES_LOCK
    _FILES_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_child)


def acquire(path: str) -> SqliteFile:
    """The process's ``SqliteFile`` of ``path`` (opened on first use), with one more user."""
    where = os.path.abspath(path)
    with _FILES_LOCK:
        found = _FILES.get(where)
        if found is None:
            found = _FILES[where] = SqliteFile(path)
        found.users += 1
        return found


def release(file: SqliteFile) -> None:
    """One user fewer; the last one closes the file's connections and its writer."""
    with _FILES_LOCK:
        file.users -= 1
        if file.users > 0:
            return
        _FILES.pop(os.path.abspath(file.path), None)
    file.close()
