"""THE storage layer: everything that opens a connection or writes SQL or Lua lives under ``stores/``.

``open_database(url)`` gives the ``Database`` of a store URL — ``memory://[NAME]``,
``sqlite:///file.db``, ``postgresql://…``, ``redis://…``, ``redis+cluster://…`` — its backend package imported only when
used, so a missing driver matters only for its own scheme (and says which extra to install). What
a store can do is declared by its ``Database.capabilities``; its parts are facets (``base.py``). The
sync/async scheme, stated once for every facet, is in ``base.py``'s docstring.

Backends, one folder each, one file per facet: ``memory/``, ``sqlite/``, ``postgres/``, ``redis/``;
what the SQL backends share is ``sql/``.
"""

from __future__ import annotations

import importlib

from .base import Capabilities, Database
from .records import BackupReport

_BACKENDS = {
    "memory": ("keepstate.stores.memory", "MemoryDatabase"),
    "sqlite": ("keepstate.stores.sqlite", "SqliteDatabase"),
    "postgresql": ("keepstate.stores.postgres", "PostgresDatabase"),
    "postgres": ("keepstate.stores.postgres", "PostgresDatabase"),
    "redis": ("keepstate.stores.redis", "RedisDatabase"),
    "rediss": ("keepstate.stores.redis", "RedisDatabase"),
    "redis+cluster": ("keepstate.stores.redis", "RedisClusterDatabase"),
    "rediss+cluster": ("keepstate.stores.redis", "RedisClusterDatabase"),
}
SCHEMES = tuple(f"{name}://" for name in _BACKENDS)


def scheme_of(url: str) -> str:
    """The scheme of a store URL; ValueError naming the ones there are."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in _BACKENDS:
        raise ValueError(f"unknown store URL {url!r:.120}: use one of {', '.join(SCHEMES)}")
    return scheme


def open_database(url: str) -> Database:
    """The ``Database`` of ``url``: no I/O for network stores until a facet is asked for."""
    module, name = _BACKENDS[scheme_of(url)]
    database: Database = getattr(importlib.import_module(module), name)(url)
    return database


def preflight(url: str, must_exist: bool = False) -> None:
    """Check ``url`` before anything is opened, creating nothing: a URL that can never be a store is
    refused (ValueError, Unavailable), and with ``must_exist`` a store that is not there yet
    (NotFound) — for the commands that only read, which must never create a store."""
    module, name = _BACKENDS[scheme_of(url)]
    getattr(importlib.import_module(module), name).preflight(url, must_exist)


def backup(url: str, target: str, replace: bool = False) -> BackupReport:
    """A checked copy of the live store at ``url`` in the file ``target`` (``Capabilities.file_backup``)."""
    module, name = _BACKENDS[scheme_of(url)]
    report: BackupReport = getattr(importlib.import_module(module), name).backup(url, target, replace)
    return report


def capabilities_of(url: str) -> Capabilities:
    """What the store at ``url`` can do, without opening it."""
    module, name = _BACKENDS[scheme_of(url)]
    declared: Capabilities = getattr(importlib.import_module(module), name).capabilities
    return declared


__all__ = [
    "SCHEMES",
    "BackupReport",
    "Capabilities",
    "Database",
    "backup",
    "capabilities_of",
    "open_database",
    "preflight",
    "scheme_of",
]
