"""Constants shared by the harness store suites (a module of its own: ``conftest`` is not importable by name)."""

from __future__ import annotations

HARNESS_BACKENDS = ["memory", "sqlite", "postgres"]
"""Every backend of the harness store (not Redis: see docs/harness-store.md)."""
SHARED_BACKENDS = ["sqlite", "postgres"]
"""The backends several processes can share."""
SMALL_CHUNK = 7
"""Bytes per log row in tests: small enough that most entries span several rows."""
