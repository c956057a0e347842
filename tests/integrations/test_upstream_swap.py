"""The shims really swap the store: each subprocess suite, run against the ``swap-probe`` target
(shims/swap_probe.py: the framework's own classes, subclassed to log each instance), passes a few
of its tests, sync and async, and the log shows the suite built the stand-in, not its own class.
Without this, a shim that silently kept the framework's store would make any adapter look right.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import upstream
import upstream_run

SAMPLES = {
    "langgraph": ("test_invoke_checkpoint_two or test_dynamic_interrupt", {"ProbeSaver"}),
    "langgraph-checkpoint-sqlite": (
        "test_batch_get_ops or test_abatch_order or test_ttl_basic",
        {"ProbeStore", "ProbeAsyncStore"},
    ),
    "openai-agents": ("test_sqlite_session_memory_direct or test_session_limit_parameter", {"ProbeSession"}),
}


@pytest.mark.timeout(upstream_run.SUITE_TIMEOUT_S + 60)
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_shim_runs_the_suite_on_the_stand_in(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    upstream.require(upstream_run.SUITES[name].sdist)
    log = tmp_path / "instances.log"
    monkeypatch.setenv("KEEPSTATE_SWAP_PROBE_LOG", str(log))
    expression, classes = SAMPLES[name]
    result = upstream_run.run(name, "swap-probe", tmp_path, plugins=("swap_probe",), args=("-k", expression))
    assert result.returncode == 0 and result.counts["failed"] + result.counts["errors"] == 0, result.tail()
    assert result.counts["passed"] >= 2, result.summary()
    built = set(log.read_text().split()) if log.exists() else set()
    assert classes <= built, f"the suite built {built or 'no stand-in'}, expected {classes}\n{result.tail()}"


@pytest.mark.timeout(upstream_run.SUITE_TIMEOUT_S + 60)
def test_langgraphs_timed_stream_tests_pass_on_a_slow_clock(tmp_path: Path) -> None:
    """The four langgraph tests that time their chunks pass when each duration reads three times as
    long, as on a loaded machine: their windows are widened, their chunks still compared."""
    upstream.require(upstream_run.SUITES["langgraph"].sdist)
    timed = "test_stream_subgraphs_during_execution or test_stream_buffering_single_node"
    result = upstream_run.run("langgraph", "framework", tmp_path, plugins=("slow_clock",), args=("-k", timed))
    assert result.returncode == 0 and result.counts["failed"] + result.counts["errors"] == 0, result.tail()
    assert result.counts["passed"] == 4, result.summary()
