"""The harness store: durable sessions, idempotent operations and named logs next to an agent.

A Python port of the Durable Object store in seeds/004, on ``memory://``, ``sqlite:///file.db``
(several processes may share the file) or ``postgresql://``::

    store = open_harness_store("sqlite:///harness.db")
    with store.transaction():
        store.create_session(id="s1", state={"model": "x"})
        record, accepted = store.enqueue(session="s1", id="op-1", input={"prompt": "hi"})
    store.start("s1", "op-1")
    store.settle("s1", "op-1", Done(result={"text": "hello"}))
    store.append("s1", "messages", [LogAppend(data={"role": "user"}, id="m1")])

The store is synchronous, like the seed's. See docs/harness-store.md.
"""

from __future__ import annotations

from ..stores import open_database
from .records import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PREFIX,
    Done,
    Enqueued,
    LogAppend,
    LogEntry,
    OperationOutcome,
    OperationRecord,
    OperationStatus,
    SessionRecord,
    Unanswered,
    check_chunk_size,
    check_prefix,
)
from .store import HarnessStore


def open_harness_store(url: str, prefix: str = DEFAULT_PREFIX, chunk_size: int = DEFAULT_CHUNK_SIZE) -> HarnessStore:
    """Open the store at ``url``, creating or migrating its tables (safe when processes race on it).

    ``prefix`` names the tables, so several stores can share one database without seeing each
    other: a letter, then letters, digits or ``_`` (at most 40), never ``_cf_…``. ``chunk_size`` is
    the most bytes of one log entry's JSON per row; larger entries continue on further rows.
    Raises InvalidRequest for a bad prefix or chunk size or a store without a harness (Redis),
    ValueError for an unknown URL scheme, Unavailable when the database cannot be reached.
    """
    check_prefix(prefix)
    check_chunk_size(chunk_size)
    database = open_database(url)
    try:
        database.capabilities.require("harness", url)
        return HarnessStore(database.harness(prefix, chunk_size), prefix, chunk_size, database.close)
    except BaseException:
        database.close()
        raise


__all__ = [
    "Done",
    "Enqueued",
    "HarnessStore",
    "LogAppend",
    "LogEntry",
    "OperationOutcome",
    "OperationRecord",
    "OperationStatus",
    "SessionRecord",
    "Unanswered",
    "open_harness_store",
]
