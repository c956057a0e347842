"""Several processes adding messages to one conversation through one store: what survives.

``race(opener_name, location, writers=2, per_writer=500)`` starts ``writers`` processes (spawned,
so each opens its own store as a separate program would), lines them up on a barrier, and has
each add ``per_writer`` distinct messages to the same conversation through
``conversations.OPENERS[opener_name]``, recording every exception by type instead of stopping.
Then it reads the conversation back and counts what is missing and what is doubled.

The framework stores' figures in docs/integrations.md come from ``python two_writers.py`` (run
from this folder); keepstate's process tests reuse ``race`` with keepstate's openers and assert
``lost == duplicated == 0``. ``pop_race`` does the same for OpenAI's ``pop_item``: it fills
one session, lets the processes pop it empty, and counts items popped twice or gone unreturned.
"""

from __future__ import annotations

import collections
import multiprocessing
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import conversations

CONVERSATION = "conversation-1"
_spawn = multiprocessing.get_context("spawn")
JOIN_TIMEOUT_S = 600


@dataclass
class Outcome:
    """What ``writers`` × ``per_writer`` appends left behind."""

    sent: int
    stored: int
    unique: int
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: float = 0.0

    @property
    def lost(self) -> int:
        return self.sent - self.unique

    @property
    def duplicated(self) -> int:
        return self.stored - self.unique

    def describe(self) -> str:
        errors = ", ".join(f"{count} × {name}" for name, count in self.errors.most_common()) or "no error raised"
        return (
            f"{self.sent} sent, {self.unique} kept ({self.lost} lost, {100 * self.lost / self.sent:.0f}%), "
            f"{self.duplicated} duplicated; {errors}; {self.seconds:.1f} s"
        )


def _writer(opener: str, location: str, writer: int, per_writer: int, ready: Any, out: Any) -> None:
    errors: collections.Counter[str] = collections.Counter()
    conversation = conversations.OPENERS[opener](location, CONVERSATION)
    ready.wait()
    for index in range(per_writer):
        try:
            conversation.append(f"w{writer}-m{index}")
        except Exception as error:
            errors[type(error).__name__] += 1
    conversation.close()
    out.put(dict(errors))


def race(opener: str, location: str, writers: int = 2, per_writer: int = 500) -> Outcome:
    """Run the writers to the end and count what the conversation kept."""
    conversations.OPENERS[opener](location, CONVERSATION).close()  # create the store and conversation first
    ready, out = _spawn.Barrier(writers), _spawn.Queue()
    processes = [
        _spawn.Process(target=_writer, args=(opener, location, n, per_writer, ready, out)) for n in range(writers)
    ]
    started = time.perf_counter()
    for process in processes:
        process.start()
    errors: collections.Counter[str] = collections.Counter()
    for _ in processes:
        errors.update(out.get(timeout=JOIN_TIMEOUT_S))
    for process in processes:
        process.join(JOIN_TIMEOUT_S)
        assert process.exitcode == 0, f"writer exited {process.exitcode}"
    seconds = time.perf_counter() - started
    reader = conversations.OPENERS[opener](location, CONVERSATION)
    try:
        texts = reader.texts()
    finally:
        reader.close()
    expected = {f"w{n}-m{i}" for n in range(writers) for i in range(per_writer)}
    kept = [text for text in texts if text in expected]
    return Outcome(writers * per_writer, len(kept), len(set(kept)), errors, seconds)


@dataclass
class PopOutcome:
    """What ``writers`` processes popping one session until it was empty took out of it."""

    items: int
    popped: list[str]
    left: int
    errors: collections.Counter[str] = field(default_factory=collections.Counter)

    @property
    def twice(self) -> int:
        return len(self.popped) - len(set(self.popped))

    @property
    def lost(self) -> int:
        return self.items - len(set(self.popped)) - self.left

    def describe(self) -> str:
        errors = ", ".join(f"{count} × {name}" for name, count in self.errors.most_common()) or "no error raised"
        return (
            f"{self.items} items, {len(set(self.popped))} popped once or more, {self.twice} popped twice, "
            f"{self.left} left, {self.lost} gone unreturned; {errors}"
        )


def _popper(opener: str, location: str, ready: Any, out: Any) -> None:
    popped: list[str] = []
    errors: collections.Counter[str] = collections.Counter()
    conversation = conversations.OPENERS[opener](location, CONVERSATION)
    ready.wait()
    while True:
        try:
            text = conversation.pop()
        except Exception as error:
            errors[type(error).__name__] += 1
            continue
        if text is None:
            break
        popped.append(text)
    conversation.close()
    out.put((popped, dict(errors)))


def pop_race(opener: str, location: str, writers: int = 2, items: int = 500) -> PopOutcome:
    """Fill one session with ``items`` messages, then let ``writers`` processes pop it empty."""
    seed = conversations.OPENERS[opener](location, CONVERSATION)
    try:
        for index in range(items):
            seed.append(f"item-{index}")
    finally:
        seed.close()
    ready, out = _spawn.Barrier(writers), _spawn.Queue()
    processes = [_spawn.Process(target=_popper, args=(opener, location, ready, out)) for _ in range(writers)]
    for process in processes:
        process.start()
    popped: list[str] = []
    errors: collections.Counter[str] = collections.Counter()
    for _ in processes:
        texts, raised = out.get(timeout=JOIN_TIMEOUT_S)
        popped += texts
        errors.update(raised)
    for process in processes:
        process.join(JOIN_TIMEOUT_S)
        assert process.exitcode == 0, f"popper exited {process.exitcode}"
    reader = conversations.OPENERS[opener](location, CONVERSATION)
    try:
        left = len(reader.texts())
    finally:
        reader.close()
    return PopOutcome(items, popped, left, errors)


POPPABLE = ("OpenAI SQLiteSession", "keepstate KeepstateSession")


def main(names: list[str]) -> None:
    for name in names or conversations.OPENERS:
        with tempfile.TemporaryDirectory() as folder:
            outcome = race(name, str(Path(folder) / "store.db"))
        print(f"{name}: {outcome.describe()}", flush=True)
        if name in POPPABLE:
            with tempfile.TemporaryDirectory() as folder:
                print(f"{name}, pop_item: {pop_race(name, str(Path(folder) / 'store.db')).describe()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
