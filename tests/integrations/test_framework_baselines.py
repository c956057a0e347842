"""The two-writer race (two_writers.py) is counted right, on every framework store it drives.

One writer loses nothing anywhere, so any loss it reported would be the harness's. Two writers on
OpenAI's SQLiteSession (each add_items is one SQLite transaction) keep every message of both, so
the race really reads both writers' messages back, and two poppers there take each item once, so
``pop_race`` collects both poppers' items. The framework stores' losses under two writers are
measured by ``python two_writers.py`` and recorded in docs/integrations.md; they are not asserted
here (they are upstream's behaviour, not ours).
"""

from __future__ import annotations

from pathlib import Path

import conversations
import pytest
import two_writers


@pytest.mark.parametrize("opener", sorted(conversations.OPENERS))
def test_one_writer_keeps_every_message(opener: str, tmp_path: Path) -> None:
    outcome = two_writers.race(opener, str(tmp_path / "store.db"), writers=1, per_writer=25)
    assert (outcome.sent, outcome.lost, outcome.duplicated) == (25, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()


def test_two_writers_are_both_counted(tmp_path: Path) -> None:
    outcome = two_writers.race("OpenAI SQLiteSession", str(tmp_path / "store.db"), writers=2, per_writer=100)
    assert (outcome.sent, outcome.unique, outcome.duplicated) == (200, 200, 0), outcome.describe()


def test_the_conversations_read_back_in_order(tmp_path: Path) -> None:
    for name, opener in conversations.OPENERS.items():
        conversation = opener(str(tmp_path / f"{len(name)}-{name[:8]}.db"), "ordered")
        try:
            for index in range(12):
                conversation.append(f"m{index}")
            assert conversation.texts() == [f"m{i}" for i in range(12)], name
            assert conversation.recent(3) == ["m9", "m10", "m11"], name
        finally:
            conversation.close()


def test_two_poppers_are_both_counted(tmp_path: Path) -> None:
    outcome = two_writers.pop_race("OpenAI SQLiteSession", str(tmp_path / "store.db"), writers=2, items=200)
    assert (len(outcome.popped), outcome.twice, outcome.lost, outcome.left) == (200, 0, 0, 0), outcome.describe()
