"""``KeepstateSession`` from several processes at once, on SQLite, PostgreSQL and Redis.

Two processes (spawned, each opening its own store, as two programs would) add 250 messages each
to one session through the OpenAI driver of conversations.py: every message is kept, none twice,
and no call raised. Two processes popping one 500-item session empty with ``pop_item`` take each
item exactly once, and none is lost. The same with messages of 1 or 12 KiB (1.8 MiB added, 1.8 MiB
popped), so that both processes cross the 1 MiB boundaries of the session's parts, a small message
still fitting where a big one makes the other process archive a part.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import two_writers
from conversations import store_url

import keepstate
from backends import declaring, fresh_url
from keepstate.integrations.openai_agents import AGENT, PARTS

OPENER = "keepstate KeepstateSession"
PADDED = "keepstate KeepstateSession, 1-12 KiB messages"


@pytest.fixture(params=declaring("shared"))
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL that several processes can share."""
    with fresh_url(request.param, tmp_path) as url:
        yield url


@pytest.mark.parametrize("opener", [OPENER, PADDED])
def test_two_processes_adding_lose_and_duplicate_nothing(location: str, opener: str) -> None:
    outcome = two_writers.race(opener, location, writers=2, per_writer=250)
    assert (outcome.sent, outcome.unique, outcome.lost, outcome.duplicated) == (500, 500, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()
    assert parts(location) >= (1 if opener == PADDED else 0)  # 1.8 MiB: the race went past a part boundary


@pytest.mark.parametrize("opener", [OPENER, PADDED])
def test_two_processes_popping_take_each_item_once(location: str, opener: str) -> None:
    outcome = two_writers.pop_race(opener, location, writers=2, items=500)
    assert sorted(outcome.popped) == sorted(f"item-{index}" for index in range(500)), outcome.describe()
    assert (outcome.twice, outcome.lost, outcome.left) == (0, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()
    assert parts(location) == 0  # the parts of a padded session (1.8 MiB) were taken back


def parts(location: str) -> int:
    """The archived parts the race's session has now."""
    store = keepstate.open(store_url(location))
    try:
        return int(store.scope("session", agent=AGENT, id=two_writers.CONVERSATION).get(PARTS, 0))
    finally:
        store.close()
