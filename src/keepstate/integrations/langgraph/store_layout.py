"""Where a LangGraph store item lives in keepstate: its key, and the JSON value kept under it.

All the items of one ``KeepstateStore`` are keys of one keepstate scope. An item's keepstate key is
its namespace labels and its key, each escaped, each label followed by ``:``::

    ("memories", "user-1"), "a1b2"      ->  memories:user-1:a1b2
    ("docs",), "report.v2"              ->  docs:report.v2
    ("users", "ada lovelace"), "k_1"    ->  users:ada_20lovelace:k_5F1

Escaping keeps ``A-Z a-z 0-9 . -`` and writes every other character as ``_`` and the hex of its
UTF-8 bytes, so the key is in keepstate's key alphabet, is read back exactly, and a namespace
prefix is a prefix of the key text ending at a ``:``: a search under ``("memories",)`` is a key
range scan, and never reaches ``("memoriesX",)``. A key longer than keepstate's 200 characters
keeps its first ``HEAD`` characters and ends with ``__`` and a hash of the whole (``__`` never
occurs in an escaped key); its namespace is then read from the value, which always holds it.

The value is an object a person can read in the console:
``{"namespace": [...], "key": ..., "value": {...}, "created_at": ISO, "updated_at": ISO,
"ttl_minutes": N or null}``, and ``"vectors"`` (base64) when the store's index embedded it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

MAX_KEY = 200
HEAD = 150
"""The characters of an over-long key kept before its hash: prefix scans up to this length stay exact."""
SEPARATOR = ":"
_KEPT = re.compile(r"[A-Za-z0-9.\-]")
_TOKEN = re.compile(r"_[0-9A-F]{2}|[^_]+")
HASHED = "__"


def escape(text: str) -> str:
    """``text`` in keepstate's key alphabet, ``:`` and ``_`` excluded (they mean something here)."""
    return "".join(
        char if _KEPT.fullmatch(char) else "".join(f"_{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        for char in text
    )


def unescape(text: str) -> str:
    raw = b"".join(
        bytes.fromhex(token[1:]) if token.startswith("_") else token.encode() for token in _TOKEN.findall(text)
    )
    return raw.decode("utf-8", "surrogatepass")


def namespace_prefix(namespace: Sequence[str]) -> str:
    """The key text every item under ``namespace`` (at any depth) starts with."""
    return "".join(escape(label) + SEPARATOR for label in namespace)


def stored_key(namespace: Sequence[str], key: str) -> str:
    """The keepstate key of the item ``key`` in ``namespace``."""
    full = namespace_prefix(namespace) + escape(key)
    if len(full) <= MAX_KEY:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()
    return full[:HEAD] + HASHED + digest[: MAX_KEY - HEAD - len(HASHED)]


def scan_prefix(namespace: Sequence[str]) -> str:
    """The keepstate key prefix to scan for the items under ``namespace``: exact up to ``HEAD``
    characters, a superset beyond (the caller checks each item's namespace from its value)."""
    return namespace_prefix(namespace)[:HEAD]


def namespace_of(key: str) -> tuple[str, ...] | None:
    """The namespace a keepstate key was made from; None for a hashed one (read it from the value)."""
    if HASHED in key:
        return None
    return tuple(unescape(label) for label in key.split(SEPARATOR)[:-1])


def now() -> str:
    """An item timestamp: UTC, always with microseconds, so that text order is time order."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def envelope(
    namespace: Sequence[str],
    key: str,
    value: Any,
    created_at: str,
    updated_at: str,
    ttl_minutes: float | None,
    vectors: str | None = None,
) -> dict[str, Any]:
    """The keepstate value of an item (with ``vectors`` when a store's index embedded it: store_index.py)."""
    item = {
        "namespace": list(namespace),
        "key": key,
        "value": dict(value),
        "created_at": created_at,
        "updated_at": updated_at,
        "ttl_minutes": ttl_minutes,
    }
    return item if vectors is None else {**item, "vectors": vectors}


def is_envelope_of(found: Any, namespace: Sequence[str], key: str) -> bool:
    """Whether a stored value is the item ``key`` of ``namespace`` (a hashed key says nothing alone)."""
    return isinstance(found, dict) and found.get("key") == key and tuple(found.get("namespace", ())) == tuple(namespace)


def ttl_seconds(ttl_minutes: float | None) -> float | None:
    return None if ttl_minutes is None else ttl_minutes * 60
