"""Two processes invoking one LangGraph thread through KeepstateSaver lose nothing, on SQLite and
PostgreSQL: each process runs a ``MessagesState`` graph (two_writers.py's driver, the same one
that shows LangGraph's own SqliteSaver losing about half), and the thread's latest checkpoint holds
every message of both, once each, in an order each writer's own messages keep.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import two_writers

OPENER = "keepstate KeepstateSaver"
PER_WRITER = 150


def _assert_nothing_lost(outcome: two_writers.Outcome) -> None:
    assert (outcome.sent, outcome.lost, outcome.duplicated) == (2 * PER_WRITER, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()


def test_two_processes_on_sqlite_lose_nothing(tmp_path: Path) -> None:
    _assert_nothing_lost(two_writers.race(OPENER, f"sqlite:///{tmp_path / 'store.db'}", per_writer=PER_WRITER))


def test_two_processes_on_postgres_lose_nothing(pg_url: str) -> None:
    _assert_nothing_lost(two_writers.race(OPENER, pg_url, per_writer=PER_WRITER))


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_each_writers_messages_keep_their_order(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}" if store == "sqlite" else request.getfixturevalue("pg_url")
    two_writers.race(OPENER, url, per_writer=40)
    reader = two_writers.conversations.OPENERS[OPENER](url, two_writers.CONVERSATION)
    try:
        texts = reader.texts()
    finally:
        reader.close()
    for writer in (0, 1):
        own = [text for text in texts if text.startswith(f"w{writer}-")]
        assert own == [f"w{writer}-m{index}" for index in range(40)]
    first_of_w1 = texts.index("w1-m0") if texts[0].startswith("w0") else texts.index("w0-m0")
    assert first_of_w1 < len(texts) - 40, "the writers never overlapped, so nothing was merged"
