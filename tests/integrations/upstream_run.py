"""Run one framework's own test suite, from its sdist, in a pytest process of its own.

Each suite runs where its authors run it: from the sdist's root, under the sdist's own pytest
settings (its pyproject.toml: asyncio mode, markers, snapshot options), with its own conftest.py.
Only a shim plugin of ours is added (``-p``, from ``shims/``): it applies the selection and the
deselect list and, for a target other than ``framework``, swaps in the target's store. Running it
in a process of its own keeps the two test trees apart (theirs is a package named ``tests``, and
our warnings-as-errors setting is not theirs).

The result is read from a JUnit XML report, so the caller can check counts as well as the exit
code: a suite that runs nothing must not pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

import targets
import upstream
from deselected import FRAMEWORK_ONLY

HERE = Path(__file__).resolve().parent
SUITE_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Suite:
    """A framework suite: the sdist, the test paths in it, the shim, and the least it must pass."""

    sdist: str
    paths: tuple[str, ...]
    shim: str
    min_passed: int
    env: dict[str, str] = field(default_factory=dict)
    framework_floor: int = 0
    """The least the ``framework`` target must pass where deselected.FRAMEWORK_ONLY takes some away."""

    def floor(self, name: str, target: str) -> int:
        """The least this suite must pass against ``target`` on this machine."""
        return self.framework_floor if target == "framework" and FRAMEWORK_ONLY.get(name) else self.min_passed


SUITES = {
    # langgraph's checkpointer-parametrised tests, memory branch only (the shim selects them).
    "langgraph": Suite("langgraph", ("tests",), "langgraph_checkpointer_shim", 640, env={"NO_DOCKER": "true"}),
    "langgraph-checkpoint-sqlite": Suite(
        "langgraph-checkpoint-sqlite",
        ("tests/test_store.py", "tests/test_async_store.py", "tests/test_ttl.py"),
        "langgraph_store_shim",
        140,
        framework_floor=110,
    ),
    "openai-agents": Suite(
        "openai-agents",
        ("tests/memory/test_session.py", "tests/memory/test_session_limit.py"),
        "openai_session_shim",
        50,
    ),
}


@dataclass(frozen=True)
class SuiteResult:
    returncode: int
    counts: dict[str, int]
    seconds: float
    log: Path

    def summary(self) -> str:
        counts = ", ".join(f"{value} {name}" for name, value in self.counts.items())
        return f"exit {self.returncode}, {counts} in {self.seconds:.0f} s (log: {self.log})"

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def run(
    name: str, target: str, work: Path, *, plugins: tuple[str, ...] = (), args: tuple[str, ...] = ()
) -> SuiteResult:
    """Run suite ``name`` against ``target``; its log and JUnit report are written under ``work``.

    ``plugins`` (from shims/) load before the suite's shim; ``args`` go to pytest as they are."""
    suite = SUITES[name]
    root = upstream.source(suite.sdist)
    report, log = work / f"{name}-{target}.xml", work / f"{name}-{target}.log"
    loaded = [option for plugin in (*plugins, suite.shim) for option in ("-p", plugin)]
    command = [
        sys.executable,
        "-m",
        "pytest",
        *suite.paths,
        "-p",
        "no:cacheprovider",
        *loaded,
        "-q",
        "-rfEs",
        f"--junitxml={report}",
        *args,
    ]
    started = time.perf_counter()
    with log.open("w") as output:
        completed = subprocess.run(
            command,
            cwd=root,
            env=_environment(suite, target),
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=SUITE_TIMEOUT_S,
            check=False,
        )
    return SuiteResult(completed.returncode, _counts(report), time.perf_counter() - started, log)


def _environment(suite: Suite, target: str) -> dict[str, str]:
    paths = [str(HERE), str(HERE / "shims"), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        **suite.env,
        "PYTHONPATH": os.pathsep.join(filter(None, paths)),
        targets.TARGET_VARIABLE: target,
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _counts(report: Path) -> dict[str, int]:
    """passed/failed/errors/skipped from the JUnit report (all zero when pytest wrote none)."""
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    if report.exists():
        for suite in ElementTree.parse(report).getroot().iter("testsuite"):
            for key in totals:
                totals[key] += int(suite.get(key, 0))
    passed = totals["tests"] - totals["failures"] - totals["errors"] - totals["skipped"]
    return {"passed": passed, "failed": totals["failures"], "errors": totals["errors"], "skipped": totals["skipped"]}
