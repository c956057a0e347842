"""Two processes invoking one LangGraph thread through KeepstateSaver lose nothing, on every shared
store: each process runs a ``MessagesState`` graph (two_writers.py's driver, the same one that shows
LangGraph's own SqliteSaver losing about half), and the thread's latest checkpoint holds every
message of both, once each, in an order each writer's own messages keep.

That a writer which keeps losing the race for the head gets its turn (turns.py) is forced by
construction (forced_turns.py): the other process writes exactly when the loser is about to commit,
so the loser loses, claims the head, and the other must wait for it. Nothing counts how the
scheduler happened to interleave the two.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import conversations
import forced_turns
import pytest
import two_writers

from backends import declaring
from keepstate.integrations.langgraph import turns

OPENER = "keepstate KeepstateSaver"
PER_WRITER = 80
HANG_S = 120
"""Bounds a wait on a writer's pipe, so a broken turn fails instead of hanging: never the thing asserted."""
shared_stores = pytest.mark.parametrize("backend_url", declaring("shared"), indirect=True)


def _texts(url: str, thread: str) -> list[str]:
    reader = conversations.OPENERS[OPENER](url, thread)
    try:
        return list(reader.texts())
    finally:
        reader.close()


@shared_stores
def test_two_processes_lose_nothing(backend_url: str) -> None:
    outcome = two_writers.race(OPENER, backend_url, per_writer=PER_WRITER)
    assert (outcome.sent, outcome.lost, outcome.duplicated) == (2 * PER_WRITER, 0, 0), outcome.describe()
    assert not outcome.errors, outcome.describe()


@shared_stores
def test_each_writers_messages_keep_their_order(backend_url: str) -> None:
    two_writers.race(OPENER, backend_url, per_writer=40)
    texts = _texts(backend_url, two_writers.CONVERSATION)
    for writer in (0, 1):
        assert [text for text in texts if text.startswith(f"w{writer}-")] == [f"w{writer}-m{n}" for n in range(40)]
    assert len(texts) == 80


def _expect(conn: Connection, what: str) -> Any:
    assert conn.poll(HANG_S), f"no {what!r} from the writer within {HANG_S} s"
    message = conn.recv()
    assert message == what or (isinstance(message, tuple) and message[0] == what), message
    return message


@pytest.fixture
def writers(backend_url: str) -> Iterator[tuple[Connection, Connection]]:
    """The honouring writer's pipe and the losing writer's, each to a spawned process."""
    spawn = multiprocessing.get_context("spawn")
    pipes = [spawn.Pipe() for _ in range(2)]
    targets = (forced_turns.honourer, forced_turns.loser)
    processes = [
        spawn.Process(target=target, args=(backend_url, child))
        for target, (_, child) in zip(targets, pipes, strict=True)
    ]
    for process in processes:
        process.start()
    yield pipes[0][0], pipes[1][0]
    for (conn, _), process in zip(pipes, processes, strict=True):
        conn.send(None)
        process.join(HANG_S)
        if process.exitcode is None:
            process.kill()
        assert process.exitcode == 0, f"a writer exited {process.exitcode}"


@shared_stores
def test_a_writer_that_keeps_losing_claims_the_head_and_the_other_process_lets_it_in(
    backend_url: str, writers: tuple[Connection, Connection]
) -> None:
    other, loser = writers
    other.send(("append", "a0"))
    _expect(other, "done")
    loser.send(("append-contested", "b0"))
    for index in range(1, turns.LOSSES_BEFORE_CLAIM + 1):  # the other moves the head under each plan
        _expect(loser, "planned")
        other.send(("append", f"a{index}"))
        _expect(other, "done")
        loser.send("go")
    _expect(loser, "claimed")
    other.send(("append", "a-last"))
    _expect(other, "waiting")  # its put saw the loser's claim and honours it
    loser.send("go")
    _, report = _expect(loser, "done")
    assert report == {"armed": False, "losses": turns.LOSSES_BEFORE_CLAIM, "claimed": True}
    _expect(other, "resumed")  # the claim is gone: the loser's commit took its place
    other.send("go")
    _expect(other, "done")
    texts = _texts(backend_url, forced_turns.THREAD)
    firsts = [f"a{n}" for n in range(turns.LOSSES_BEFORE_CLAIM + 1)]
    assert texts == [*firsts, "b0", "a-last"]  # each once, and the loser in before the other's next
