"""Constants shared by the harness store suites (a module of its own: ``conftest`` is not importable by name)."""

from __future__ import annotations

from backends import declaring

HARNESS_BACKENDS = declaring("harness")
"""Every backend that declares the harness facet."""
SHARED_BACKENDS = declaring("harness", "shared")
"""Those that several processes can share."""
SMALL_CHUNK = 7
"""Bytes per log row in tests: small enough that most entries span several rows."""
