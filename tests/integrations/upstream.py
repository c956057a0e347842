"""The frameworks' own test suites, taken from their published source distributions at test time.

The integrations are proven by the frameworks' own tests (docs/integrations.md), and those tests
are not ours to copy into the repository: ``source(NAME)`` downloads the pinned sdist with pip
(``pip download --no-deps --no-binary :all: NAME==VERSION``, so pip's own index settings apply),
checks its sha256 against the pin below, extracts it once into ``<venv>/upstream/NAME-VERSION/``
and returns that folder. Later calls, in this process or another, reuse the folder; a lock file
makes concurrent first calls (pytest-xdist workers, parallel suites) download it only once.

Each pin must be the version installed from ``constraints.txt``: a suite of one version run
against the library of another proves nothing, so a mismatch is an error, not a warning.

Without a network and with an empty cache, ``source`` raises ``UpstreamUnavailable`` saying what
it tried; ``require(NAME)`` turns that into a pytest skip, or a failure where
``KEEPSTATE_REQUIRE_SERVICES=1`` (CI), like an absent PostgreSQL.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REQUIRE_SERVICES = os.environ.get("KEEPSTATE_REQUIRE_SERVICES") == "1"
DOWNLOAD_TIMEOUT_S = 600


@dataclass(frozen=True)
class Sdist:
    """One pinned source distribution: the project name, its version and the archive's sha256."""

    name: str
    version: str
    sha256: str

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.version}"


SDISTS = {
    sdist.name: sdist
    for sdist in (
        Sdist("langgraph", "1.2.22", "32700dc34b5cf9ebb397258c2e56392f017d4dbc51c9591339225c3c1b7b5126"),
        Sdist(
            "langgraph-checkpoint-sqlite", "3.1.2", "4e3f376fa6f192d6ad2a1a4643b039986f1593552ef870e9e45281575de6fbf2"
        ),
        Sdist(
            "langgraph-checkpoint-conformance",
            "0.0.2",
            "6718e00937bf2f04cdfd2cdfabea23e1dabb79a534ff4c127f305f6b40dad4e0",
        ),
        Sdist("openai-agents", "0.24.0", "4b4b285f4fed81fdf1b4ac426a9101658d9cd29b4fb1aaeee18f639b77e704e3"),
    )
}


class UpstreamUnavailable(RuntimeError):
    """The sdist is neither cached nor downloadable (no network, no such version, a bad hash)."""


def cache_root() -> Path:
    """``<venv>/upstream``: this interpreter's virtual environment, else the checkout's ``.venv``."""
    override = os.environ.get("KEEPSTATE_UPSTREAM_CACHE")
    if override:
        return Path(override)
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "upstream"
    return Path(__file__).resolve().parents[2] / ".venv" / "upstream"


def source(name: str) -> Path:
    """The extracted sdist of ``name`` at its pinned version (downloaded and checked once)."""
    sdist = SDISTS[name]
    _check_installed(sdist)
    root = cache_root()
    target = root / sdist.folder
    if (target / "PKG-INFO").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{sdist.folder}.lock"):
        if not (target / "PKG-INFO").exists():
            _extract(_download(sdist, root), target)
    return target


def require(name: str) -> Path:
    """``source(name)`` for a test: skips (or fails under KEEPSTATE_REQUIRE_SERVICES=1) when absent."""
    import pytest

    try:
        return source(name)
    except UpstreamUnavailable as error:
        if REQUIRE_SERVICES:
            pytest.fail(f"{error} (KEEPSTATE_REQUIRE_SERVICES=1)")
        pytest.skip(str(error))


def _check_installed(sdist: Sdist) -> None:
    """Only meaningful for the projects that are installed under the same name (all of ours are)."""
    try:
        installed = importlib.metadata.version(sdist.name)
    except importlib.metadata.PackageNotFoundError:
        return
    if installed != sdist.version:
        raise UpstreamUnavailable(
            f"{sdist.name} {installed} is installed but its tests are pinned at {sdist.version}: "
            "run `make install` (constraints.txt) or move the pin in tests/integrations/upstream.py"
        )


def _download(sdist: Sdist, root: Path) -> Path:
    """The checked archive, fetched by pip into a scratch folder under ``root`` (removed on failure)."""
    scratch = Path(tempfile.mkdtemp(prefix=".download-", dir=root))
    try:
        return _fetch(sdist, root, scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _fetch(sdist: Sdist, root: Path, scratch: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--dest",
        str(scratch),
        f"{sdist.name}=={sdist.version}",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        raise UpstreamUnavailable(f"downloading the {sdist.folder} sdist timed out after {error.timeout} s") from None
    archives = sorted(scratch.glob("*.tar.gz"))
    if result.returncode != 0 or len(archives) != 1:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise UpstreamUnavailable(
            f"cannot download the {sdist.folder} sdist into the empty cache {root} "
            f"(pip exited {result.returncode}): {' | '.join(tail) or 'no archive'}"
        )
    digest = hashlib.sha256(archives[0].read_bytes()).hexdigest()
    if digest != sdist.sha256:
        raise UpstreamUnavailable(f"{archives[0].name} has sha256 {digest}, pinned {sdist.sha256}")
    return archives[0]


def _extract(archive: Path, target: Path) -> None:
    """Unpack into a scratch folder beside ``target``, then rename it into place in one step."""
    scratch = Path(tempfile.mkdtemp(prefix=".extract-", dir=target.parent))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        (top,) = scratch.iterdir()
        top.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(archive.parent, ignore_errors=True)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
