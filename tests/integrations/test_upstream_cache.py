"""upstream.py: a pinned sdist is downloaded once, checked, reused offline, and its absence is
reported clearly (a skip, or a failure under KEEPSTATE_REQUIRE_SERVICES=1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import upstream

SMALL = "langgraph-checkpoint-conformance"  # the smallest pinned sdist (~90 kB)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """pip sees no index and an empty find-links folder: nothing can be downloaded."""
    (tmp_path / "no-links").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-links"))
    return tmp_path


def test_an_empty_cache_without_network_says_what_it_tried(offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEPSTATE_UPSTREAM_CACHE", str(offline / "cache"))
    with pytest.raises(upstream.UpstreamUnavailable, match=f"cannot download the {SMALL}-0.0.2 sdist"):
        upstream.source(SMALL)
    assert not (offline / "cache" / f"{SMALL}-0.0.2").exists()
    assert not list((offline / "cache").glob(".download-*")), "the scratch download folder was left behind"


@pytest.mark.parametrize(("required", "outcome"), [(False, pytest.skip.Exception), (True, pytest.fail.Exception)])
def test_require_skips_or_fails(
    offline: Path, monkeypatch: pytest.MonkeyPatch, required: bool, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("KEEPSTATE_UPSTREAM_CACHE", str(offline / "cache"))
    monkeypatch.setattr(upstream, "REQUIRE_SERVICES", required)
    with pytest.raises(outcome, match="cannot download"):
        upstream.require(SMALL)


def test_a_cached_sdist_is_used_without_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first = upstream.require(SMALL)
    (tmp_path / "no-links").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-links"))
    assert upstream.source(SMALL) == first
    assert (first / "langgraph" / "checkpoint" / "conformance" / "validate.py").exists()


def test_an_archive_with_another_hash_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    upstream.require(SMALL)  # skips when offline: this one needs a download
    pinned = upstream.SDISTS[SMALL]
    monkeypatch.setitem(upstream.SDISTS, SMALL, upstream.Sdist(pinned.name, pinned.version, "0" * 64))
    monkeypatch.setenv("KEEPSTATE_UPSTREAM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(upstream.UpstreamUnavailable, match=f"has sha256 {pinned.sha256}, pinned 0+"):
        upstream.source(SMALL)
    assert not (tmp_path / "cache" / pinned.folder).exists()


def test_a_pin_other_than_the_installed_version_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(upstream.SDISTS, "openai-agents", upstream.Sdist("openai-agents", "0.0.1", "0" * 64))
    with pytest.raises(upstream.UpstreamUnavailable, match=r"openai-agents 0\.24\.0 is installed .* pinned at 0\.0\.1"):
        upstream.source("openai-agents")
