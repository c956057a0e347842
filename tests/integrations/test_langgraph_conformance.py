"""langgraph-checkpoint-conformance, from its sdist, over every saver in targets.CONFORMANCE_SAVERS.

The suite is a library (``checkpointer_test`` registers a saver factory, ``validate`` runs the
capability suites against fresh savers and returns a report), not a pytest file, so it runs in
this process: the sdist's folder is put on ``sys.path`` (``langgraph`` is a namespace package, so
its ``langgraph.checkpoint.conformance`` joins the installed ones) and the test checks that the
code it ran is the sdist's. Every base capability must pass, and each extended one the target
declares (copy_thread, delete_for_runs, prune) must be detected and pass; an extended capability
a saver has but does not declare must still pass.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import targets
import upstream

EXTENDED = ("copy_thread", "delete_for_runs", "prune")


def conformance() -> ModuleType:
    root = upstream.require("langgraph-checkpoint-conformance")
    if str(root) not in sys.path:
        sys.path.append(str(root))
    module = importlib.import_module("langgraph.checkpoint.conformance")
    assert Path(module.__file__ or "").is_relative_to(root), f"conformance loaded from {module.__file__}"
    return module


@pytest.mark.parametrize("name", sorted(targets.CONFORMANCE_SAVERS))
async def test_conformance(name: str, request: pytest.FixtureRequest) -> None:
    suite, target = conformance(), targets.CONFORMANCE_SAVERS[name]

    async def fresh_saver() -> AsyncIterator[Any]:
        async with target.open(request) as saver:
            yield saver

    report = await suite.validate(suite.checkpointer_test(name=name)(fresh_saver))
    results = report.to_dict()["results"]
    failures = {cap: result["failures"] for cap, result in results.items() if result["passed"] is False}
    assert report.passed_all_base() and not failures, failures
    missing = [cap for cap in target.extended if not results[cap]["detected"] or not results[cap]["passed"]]
    assert not missing, f"extended capabilities not detected or not passed: {missing}"
    assert sum(result["tests_passed"] for result in results.values()) >= 50
