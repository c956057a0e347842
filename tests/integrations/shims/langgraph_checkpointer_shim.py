"""pytest plugin for langgraph's own tests: the checkpointer-parametrised part, its memory branch.

langgraph's tests/conftest.py parametrises ``sync_checkpointer`` and ``async_checkpointer`` over
memory, sqlite and (with Docker) postgres, and its snapshots are keyed by those test ids. We keep
only the ``memory`` parametrisation of the tests that take one of those fixtures, and for any
target but ``framework`` the memory branch yields the target's checkpointer instead of
``MemorySaverAssertImmutable``: the ids, hence the snapshots, stay the same.

The swap replaces ``tests.conftest_checkpointer._checkpointer_memory`` when this plugin is
imported (``-p``, run from the sdist's root), before langgraph's conftest.py imports it by name.
"""

from __future__ import annotations

import pytest
import targets
from shim_support import deselect

SUITE = "langgraph"
FIXTURES = ("sync_checkpointer", "async_checkpointer")


def _install_target() -> None:
    factory = targets.CHECKPOINTERS[targets.current()]
    if factory is None:
        return
    import tests.conftest_checkpointer as upstream_fixtures

    upstream_fixtures._checkpointer_memory = factory


def _memory_variant(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(params.get(name) == "memory" for name in FIXTURES)


_install_target()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(SUITE, config, items, keep=_memory_variant)
