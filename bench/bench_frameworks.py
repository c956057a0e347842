"""Benchmark: a 1,000-turn conversation through each framework's own store, and keepstate's adapter.

A turn is what an agent does each time it is spoken to: add one message to the conversation and
read the recent ones (the last 10). Each store starts on a fresh SQLite file; the first 100 and
the last 100 turns are timed (after a 5-turn warm-up on another conversation of the same store),
so "last / first" says how a store's cost grows with history (1.0
is flat). The stores are driven through the same code the process tests use
(tests/integrations/conversations.py): a LangGraph graph over MessagesState with a checkpointer,
a LangGraph BaseStore item, an ADK session (get_session + append_event), an OpenAI Session.

Each framework has a slot in ``ADAPTERS`` for keepstate's adapter, an opener of the same shape
over a keepstate store URL; it is timed beside the framework's store in the same run, the two
taking turns (turn i of each before turn i + 1 of either: a noisy machine weighs on both alike),
and compared at the end ("adapter / framework, last 100"). Until the adapters land the slots are empty and the
rows say so. ``python -m bench frameworks`` runs it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.timing import table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integrations"))
from conversations import OPENERS, Conversation

TURNS = 1000
WINDOW = 100  # turns timed at each end
RECENT = 10
WARM_UP = 5

Opener = Callable[[str, str], Conversation]

# The framework stores: conversations.OPENERS but keepstate's own (named "keepstate ...").
FRAMEWORK_STORES = [name for name in OPENERS if not name.startswith("keepstate")]

# framework store (a name in conversations.OPENERS) -> keepstate's adapter for the same interface:
# opener(store URL, conversation id); None until the adapter exists.
ADAPTERS: dict[str, Opener | None] = dict.fromkeys(FRAMEWORK_STORES)
ADAPTERS["LangGraph SqliteStore"] = OPENERS["keepstate KeepstateStore"]
ADAPTERS["OpenAI SQLiteSession"] = OPENERS["keepstate KeepstateSession"]
ADAPTERS["ADK DatabaseSessionService (SQLite)"] = OPENERS["keepstate ADK"]
ADAPTERS["LangGraph SqliteSaver"] = OPENERS["keepstate KeepstateSaver"]


def _turn(conversation: Conversation, turn: int) -> float:
    """Seconds for one turn: add a message, read the recent ones."""
    started = time.perf_counter()
    conversation.append(f"message {turn}: " + "lorem ipsum " * 8)
    conversation.recent(RECENT)
    return time.perf_counter() - started


def _warm_up(opener: Opener, location: str) -> None:
    """A few turns of another conversation first, so lazy imports and first connections are not
    counted in the first window."""
    conversation = opener(location, "warm-up")
    try:
        for turn in range(WARM_UP):
            conversation.append(f"warm-up {turn}")
            conversation.recent(RECENT)
    finally:
        conversation.close()


Place = tuple[Opener, str, Path]  # an opener, its location, the folder whose files are the store


def _measure(places: list[Place]) -> list[tuple[float, float, int]]:
    """For each place: (ms per turn over the first WINDOW turns, over the last WINDOW turns, bytes
    on disk). The stores take turns (turn i of each before turn i + 1 of any), so the noise of a
    shared machine weighs on each alike and "adapter / framework" compares like with like."""
    for opener, location, _ in places:
        _warm_up(opener, location)
    conversations = [opener(location, "bench-conversation") for opener, location, _ in places]
    try:
        spent = [[_turn(conversation, turn) for conversation in conversations] for turn in range(TURNS)]
        assert all(len(c.texts()) == TURNS for c in conversations), "a store did not keep every message"
    finally:
        for conversation in conversations:
            conversation.close()
    measured = []
    for index, (_, _, folder) in enumerate(places):
        mine = [turns[index] for turns in spent]
        first, last = (1000 * sum(part) / WINDOW for part in (mine[:WINDOW], mine[-WINDOW:]))
        measured.append((first, last, sum(path.stat().st_size for path in folder.iterdir() if path.is_file())))
    return measured


def _rows(name: str) -> list[tuple[object, ...]]:
    adapter = ADAPTERS.get(name)
    with (
        tempfile.TemporaryDirectory(prefix="bench-frameworks-") as theirs,
        tempfile.TemporaryDirectory(prefix="bench-frameworks-") as ours,
    ):
        places: list[Place] = [(OPENERS[name], str(Path(theirs) / "store.db"), Path(theirs))]
        if adapter is not None:
            places.append((adapter, f"sqlite:///{Path(ours) / 'store.db'}", Path(ours)))
        (first, last, size), *adapted = _measure(places)
    rows: list[tuple[object, ...]] = [(name, first, last, f"{last / first:.2f}x", f"{size / 1e6:.1f}", "")]
    if not adapted:
        return [*rows, (f"keepstate adapter for {name}", "not yet", "", "", "", "")]
    ((our_first, our_last, our_size),) = adapted
    return [
        *rows,
        (
            f"keepstate adapter for {name}",
            our_first,
            our_last,
            f"{our_last / our_first:.2f}x",
            f"{our_size / 1e6:.1f}",
            f"{our_last / last:.2f}x",
        ),
    ]


def run() -> str:
    rows = [row for name in FRAMEWORK_STORES for row in _rows(name)]
    header = (
        "store",
        "ms/turn, first 100",
        "ms/turn, last 100",
        "last / first",
        "MB on disk",
        "adapter / framework, last 100",
    )
    return (
        "## Framework stores over a 1,000-turn conversation\n\n"
        f"A turn: add one message (~100 bytes) and read the last {RECENT}; {TURNS} turns on a fresh SQLite file, "
        f"the first and last {WINDOW} timed, a framework's store and its adapter "
        "taking turns. One process; a noisy 2-core machine, so compare within a run.\n\n" + table(header, rows) + "\n"
    )


if __name__ == "__main__":
    print(run())
