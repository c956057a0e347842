"""What the shims share: the deselection (deselected.py, each entry with its reason) and the
rebinding of a framework store's name inside the collected test modules.

A deselect entry names a test by its node id, with or without its parameters: without, it covers
every parametrisation. pytest reports the deselected count, and tests/integrations checks the
passed count, so a suite that silently selects nothing (an upstream rename) fails.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

import pytest
import targets
from deselected import DESELECTED, FRAMEWORK_ONLY


def deselect(
    suite: str, config: pytest.Config, items: list[pytest.Item], keep: Callable[[pytest.Item], bool] | None = None
) -> None:
    """Remove from ``items`` the suite's deselected tests and those ``keep(item)`` refuses."""
    listed = DESELECTED.get(suite, {})
    if targets.current() == "framework":
        listed = {**listed, **FRAMEWORK_ONLY.get(suite, {})}
    kept, dropped = [], []
    for item in items:
        base = item.nodeid.split("[", 1)[0]
        refused = keep is not None and not keep(item)
        (dropped if refused or item.nodeid in listed or base in listed else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def rebind(items: list[pytest.Item], stand_ins: Mapping[str, object] | None) -> None:
    """In every module of ``items``, point each name of ``stand_ins`` that it has at its stand-in.

    The tests then build the stand-in from their own arguments while the framework's library keeps
    its classes (its internals never see the swap). ``None``: the suite's own store, no rebinding.
    """
    if stand_ins is None:
        return
    for name in {item.module.__name__ for item in items if isinstance(item, pytest.Function)}:
        module = sys.modules[name]
        for attribute, stand_in in stand_ins.items():
            if hasattr(module, attribute):
                setattr(module, attribute, stand_in)
