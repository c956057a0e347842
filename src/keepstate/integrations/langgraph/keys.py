"""Where a LangGraph thread lives in keepstate: the key of each checkpoint, blob, write list and index.

A thread is one session scope (agent ``langgraph``), so the console lists it as a session and deleting
the session drops its checkpoints. LangGraph's names (thread ids, namespaces, channels, versions) may
hold any character, keepstate keys only ``A-Z a-z 0-9 . _ : -``: ``part`` keeps a name that is already
a safe key part and hashes any other, so keys stay unique. ``.`` separates parts and never occurs
inside one, so a prefix scan of ``cp.<ns>.`` sees that namespace only.
"""

from __future__ import annotations

import hashlib
import re

AGENT = "langgraph"
"""The agent name of every scope the saver writes (the session scopes of threads, the agent scope)."""

_SAFE = re.compile(r"[A-Za-z0-9_:-]{1,64}")
_HASHED = "x-"

HEAD = "head"
CHECKPOINT = "cp"
BLOB = "blob"
WRITES = "w"
MESSAGES = "messages"
"""The readable conversation of the thread (``{role, content, id}`` items), for the console."""
THREAD_INDEX = "thread"
RUN_INDEX = "run"


def part(name: str) -> str:
    """``name`` as one key part: itself when safe, else a hash (also for names that look hashed)."""
    if _SAFE.fullmatch(name) and not name.startswith(_HASHED):
        return name
    return _HASHED + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def thread_key(thread_id: str) -> str:
    """The session id a thread is kept under (its thread id when that is a safe name)."""
    return part(str(thread_id))


def head(ns: str) -> str:
    return f"{HEAD}.{part(ns)}"


def checkpoint(ns: str, checkpoint_id: str) -> str:
    return f"{CHECKPOINT}.{part(ns)}.{part(checkpoint_id)}"


def checkpoints_prefix(ns: str | None = None) -> str:
    """Every checkpoint of namespace ``ns``, or of every namespace when None."""
    return f"{CHECKPOINT}." if ns is None else f"{CHECKPOINT}.{part(ns)}."


def blob(ns: str, channel: str, version: str | int | float) -> str:
    return f"{BLOB}.{part(ns)}.{part(channel)}.{part(str(version))}"


def blob_part(blob_key: str, index: int) -> str:
    """The ``index``-th part of a snapshot too large for one value."""
    return f"{blob_key}.p{index}"


def writes(ns: str, checkpoint_id: str) -> str:
    return f"{WRITES}.{part(ns)}.{part(checkpoint_id)}"


def thread_entry(key: str) -> str:
    """The agent-scope entry naming one thread (for ``list(None)`` and ``delete_for_runs``)."""
    return f"{THREAD_INDEX}.{key}"


def run_entry(run_id: str) -> str:
    """The agent-scope list of the checkpoints one run wrote."""
    return f"{RUN_INDEX}.{part(str(run_id))}"
