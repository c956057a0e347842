"""Backends chosen by URL scheme, each imported only when used.

``open_backend(url)`` gives the async face (server, platform), ``open_sync_backend(url)`` the sync
face (embedded ``keepstate.open``). Each backend module provides ``open_async(url)`` and
``open_sync(url)``; a module whose driver is missing says which extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .base import Backend, SyncBackend

_MODULES = {
    "memory": "keepstate.stores.memory",
    "sqlite": "keepstate.stores.sqlite",
    "postgresql": "keepstate.stores.postgres",
    "postgres": "keepstate.stores.postgres",
    "redis": "keepstate.stores.redis",
}


def scheme_of(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in _MODULES:
        known = ", ".join(f"{name}://" for name in _MODULES)
        raise ValueError(f"unknown store URL {url!r}: use one of {known}")
    return scheme


def backend_module(url: str) -> ModuleType:
    return importlib.import_module(_MODULES[scheme_of(url)])


async def open_backend(url: str) -> Backend:
    """The async face of the store at ``url``, schema migrated."""
    backend: Backend = await backend_module(url).open_async(url)
    return backend


def open_sync_backend(url: str) -> SyncBackend:
    """The sync face of the store at ``url``, schema migrated."""
    backend: SyncBackend = backend_module(url).open_sync(url)
    return backend


__all__ = ["Backend", "SyncBackend", "backend_module", "open_backend", "open_sync_backend", "scheme_of"]
