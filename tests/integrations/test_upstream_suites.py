"""The frameworks' own suites (langgraph, langgraph-checkpoint-sqlite, openai-agents), one test
each per target (targets.SUITE_TARGETS), each run from its sdist in a pytest process of its own.

A suite passes when its process exits 0 with nothing failed and at least its ``min_passed``
tests passed: the floor catches a selection that silently shrank (an upstream rename, a shim that
deselects too much). The log of a failing run is shown in the failure message.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import targets
import upstream
import upstream_run


@pytest.mark.timeout(upstream_run.SUITE_TIMEOUT_S + 60)
@pytest.mark.parametrize("target", targets.SUITE_TARGETS)
@pytest.mark.parametrize("name", sorted(upstream_run.SUITES))
def test_framework_suite(name: str, target: str, tmp_path: Path) -> None:
    if target not in targets.suite_stores(name):
        pytest.skip(f"no {target} store for the {name} suite")
    upstream.require(upstream_run.SUITES[name].sdist)
    result = upstream_run.run(name, target, tmp_path)
    print(f"{name} against {target}: {result.summary()}")
    failed = result.counts["failed"] + result.counts["errors"]
    assert result.returncode == 0 and failed == 0, f"{result.summary()}\n{result.tail()}"
    floor = upstream_run.SUITES[name].floor(name, target)
    assert result.counts["passed"] >= floor, (
        f"only {result.counts['passed']} passed, expected at least {floor}: {result.summary()}\n{result.tail()}"
    )
