"""Benchmark: a 1,000-turn conversation through each framework's own store, and keepstate's adapter.

A turn is what an agent does each time it is spoken to: add one message to the conversation and
read the recent ones (the last 10). Each store starts on a fresh SQLite file; the first 100 and
the last 100 turns are timed (after a 5-turn warm-up on another conversation of the same store),
so "last / first" says how a store's cost grows with history (1.0
is flat). The stores are driven through the same code the process tests use
(tests/integrations/conversations.py): a LangGraph graph over MessagesState with a checkpointer,
a LangGraph BaseStore item, an ADK session (get_session + append_event), an OpenAI Session.

Each framework has a slot in ``ADAPTERS`` for keepstate's adapter, an opener of the same shape
over a keepstate store URL; it is timed beside the framework's store in the same run and compared
at the end ("adapter / framework, last 100"). Until the adapters land the slots are empty and the
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

# framework store (a name in conversations.OPENERS) -> keepstate's adapter for the same interface:
# opener(store URL, conversation id); None until the adapter exists. keepstate's own openers (named
# "keepstate-...") are adapters, not framework stores: they are timed in their framework's row.
ADAPTERS: dict[str, Opener | None] = dict.fromkeys(name for name in OPENERS if not name.startswith("keepstate"))
ADAPTERS["LangGraph SqliteSaver"] = OPENERS["keepstate-saver"]


def _turns(conversation: Conversation) -> list[float]:
    """Seconds per turn, for every turn."""
    spent = []
    for turn in range(TURNS):
        started = time.perf_counter()
        conversation.append(f"message {turn}: " + "lorem ipsum " * 8)
        conversation.recent(RECENT)
        spent.append(time.perf_counter() - started)
    return spent


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


def _measure(opener: Opener, location: str) -> tuple[float, float, int]:
    """(ms per turn over the first WINDOW turns, over the last WINDOW turns, bytes on disk)."""
    _warm_up(opener, location)
    conversation = opener(location, "bench-conversation")
    try:
        spent = _turns(conversation)
        assert len(conversation.texts()) == TURNS, "the store did not keep every message"
    finally:
        conversation.close()
    first, last = (1000 * sum(part) / WINDOW for part in (spent[:WINDOW], spent[-WINDOW:]))
    folder = Path(location.removeprefix("sqlite:///")).parent
    return first, last, sum(path.stat().st_size for path in folder.iterdir() if path.is_file())


def _fresh(opener: Opener, url: bool) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory(prefix="bench-frameworks-") as folder:
        path = Path(folder) / "store.db"
        return _measure(opener, f"sqlite:///{path}" if url else str(path))


def _rows(name: str) -> list[tuple[object, ...]]:
    first, last, size = _fresh(OPENERS[name], url=False)
    rows: list[tuple[object, ...]] = [(name, first, last, f"{last / first:.2f}x", f"{size / 1e6:.1f}", "")]
    adapter = ADAPTERS.get(name)
    if adapter is None:
        return [*rows, (f"keepstate adapter for {name}", "not yet", "", "", "", "")]
    ours = _fresh(adapter, url=True)
    return [*rows, (f"keepstate adapter for {name}", ours[0], ours[1], f"{ours[1] / ours[0]:.2f}x",
                    f"{ours[2] / 1e6:.1f}", f"{ours[1] / last:.2f}x")]


def run() -> str:
    rows = [row for name in ADAPTERS for row in _rows(name)]
    header = ("store", "ms/turn, first 100", "ms/turn, last 100", "last / first", "MB on disk",
              "adapter / framework, last 100")
    return (
        "## Framework stores over a 1,000-turn conversation\n\n"
        f"A turn: add one message (~100 bytes) and read the last {RECENT}; {TURNS} turns on a fresh SQLite file, "
        f"the first and last {WINDOW} timed. One process; a noisy 2-core machine, so compare within a run.\n\n"
        + table(header, rows) + "\n"
    )


if __name__ == "__main__":
    print(run())
