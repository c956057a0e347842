"""``KeepstateSession`` from several processes at once, on SQLite, PostgreSQL and Redis.

Two processes (spawned, each opening its own store, as two programs would) add 500 messages each
to one session through the OpenAI driver of conversations.py: every message is kept, none twice,
and no call raised. Two processes popping one 500-item session empty with ``pop_item`` take each
item exactly once, and none is lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import two_writers

OPENER = "keepstate KeepstateSession"


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL that several processes can share."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'sessions.db'}"
    return str(request.getfixturevalue({"postgres": "pg_url", "redis": "redis_url"}[request.param]))


def test_two_processes_adding_lose_and_duplicate_nothing(location: str) -> None:
    outcome = two_writers.race(OPENER, location, writers=2, per_writer=500)
    assert (outcome.sent, outcome.unique, outcome.lost, outcome.duplicated) == (1000, 1000, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()


def test_two_processes_popping_take_each_item_once(location: str) -> None:
    outcome = two_writers.pop_race(OPENER, location, writers=2, items=500)
    assert sorted(outcome.popped) == sorted(f"item-{index}" for index in range(500)), outcome.describe()
    assert (outcome.twice, outcome.lost, outcome.left) == (0, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()
