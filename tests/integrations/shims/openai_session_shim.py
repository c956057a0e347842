"""pytest plugin for openai-agents' session tests (tests/memory/test_session.py and
test_session_limit.py).

Those tests build ``SQLiteSession(session_id, db_path, session_settings=...)`` themselves (the
in-memory default when no path is given). For any target but ``framework`` this plugin rebinds
``SQLiteSession`` in each collected test module to the target's stand-in (targets.SESSIONS), a
class built from those same arguments; the library's own ``SQLiteSession`` is left untouched.
"""

from __future__ import annotations

import pytest
import targets
from shim_support import deselect, rebind

SUITE = "openai-agents"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(SUITE, config, items)
    stand_in = targets.SESSIONS[targets.current()]
    rebind(items, None if stand_in is None else {"SQLiteSession": stand_in})
