"""pytest plugin for langgraph-checkpoint-sqlite's BaseStore tests (test_store, test_async_store,
test_ttl), with their ``store`` fixtures swapped.

Those tests build their stores in the test modules themselves, through the names ``SqliteStore``
and ``AsyncSqliteStore`` (``Cls.from_conn_string(path, ttl=...)`` then ``setup()``). For any target
but ``framework`` this plugin rebinds those two names in each collected test module to the
target's stand-ins (targets.STORES), so the fixtures and the TTL tests build the target's store
from the same arguments; the library's own classes are left untouched.
"""

from __future__ import annotations

import pytest
import targets
from shim_support import deselect, rebind

SUITE = "langgraph-checkpoint-sqlite"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(SUITE, config, items)
    rebind(items, targets.STORES[targets.current()])
