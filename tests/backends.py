"""Which backends a suite runs over: chosen by what each store declares, never by a hand-kept list.

Every suite parametrises its ``backend_url`` fixture (``conftest.py``) with ``declaring(...)`` of the
facets it exercises, so a backend that declares a facet is held to that facet's conformance suite.
"""

from __future__ import annotations

from keepstate.stores import capabilities_of

SAMPLE_URLS = {"memory": "memory://", "sqlite": "sqlite:///keepstate.db", "postgres": "postgresql://localhost/db",
               "redis": "redis://localhost"}
"""One URL of each backend the fixtures can make a fresh store of."""
NETWORK = ["postgres", "redis"]
"""The backends reached over TCP, which the outage tests cut with a proxy."""


def declaring(*facets: str) -> list[str]:
    """The backends whose store declares every one of ``facets`` (``shared``, ``platform``, ``leases``,
    ``harness``); with none, every backend (they all have the state facet)."""
    return [name for name, url in SAMPLE_URLS.items()
            if all(getattr(capabilities_of(url), facet) for facet in facets)]
