"""What a user reads before the code: one licence everywhere, one version everywhere with its place in
the changelog, and docs that speak of the product, never of how it was built (an issue number, a
branch, the specification it was written from)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import keepstate

ROOT = Path(__file__).resolve().parent.parent
SDK = ROOT / "sdk" / "typescript"
USER_DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", SDK / "README.md", ROOT / "CHANGELOG.md"]
INTERNAL = re.compile(r"\bissue \d+|\bthis branch\b|\bthe spec\b|\bspec's\b|\bseed \d+", re.IGNORECASE)


def test_one_licence_in_a_file_and_in_both_packages() -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert (SDK / "LICENSE").read_text() == licence  # the npm package ships its own copy
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    manifest = json.loads((SDK / "package.json").read_text())
    lock = json.loads((SDK / "package-lock.json").read_text())["packages"][""]
    assert pyproject["license"] == manifest["license"] == lock["license"] == "Apache-2.0"
    assert "LICENSE" in pyproject["license-files"] and "LICENSE" in manifest["files"]


def test_one_version_and_its_changelog() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    manifest = json.loads((SDK / "package.json").read_text())
    assert keepstate.__version__ == version == manifest["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## (.+)$", changelog, flags=re.M)
    assert sections[:2] == ["Versioning", "Unreleased"] and f"{version}" in sections


def test_user_docs_speak_of_the_product_only() -> None:
    for page in USER_DOCS:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            found = INTERNAL.search(line)
            assert found is None, f"{page.relative_to(ROOT)}:{number} speaks of {found.group(0)!r}: {line.strip()}"
