"""Two savers (as two processes would) continuing one thread at once: the latest checkpoint holds
both writers' messages; and a deliberate fork (time travel from an older checkpoint) stays a fork.

On every backend. Saver A's node runs a whole invoke of saver B on the same thread
before it returns, so B's checkpoints land between A's read of the thread and A's next write, every
time.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from backends import declaring
from keepstate.errors import VersionConflict
from keepstate.integrations.langgraph import KeepstateSaver, keys, turns
from keepstate.integrations.langgraph import saver as saver_module


def _graph(saver: KeepstateSaver, node: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


def _message(text: str) -> HumanMessage:
    return HumanMessage(text, id=uuid.uuid4().hex)


def _texts(graph: Any, config: Any) -> list[str]:
    return [message.content for message in graph.get_state(config).values["messages"]]


@contextlib.contextmanager
def _after_a_first_turn(tmp_path: Path) -> Iterator[tuple[KeepstateSaver, Any, Any]]:
    """A saver on a new SQLite store, a graph that replies "reply", and thread ``t`` after its turn "first"."""
    config = {"configurable": {"thread_id": "t"}}
    with KeepstateSaver(f"sqlite:///{tmp_path / 'store.db'}") as saver:
        graph = _graph(saver, lambda state: {"messages": [AIMessage("reply", id=uuid.uuid4().hex)]})
        graph.invoke({"messages": [_message("first")]}, config)
        yield saver, graph, config


@pytest.mark.parametrize("backend_url", declaring(), indirect=True)
@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
@pytest.mark.parametrize("opened_first", [True, False])
def test_a_writer_that_raced_another_keeps_both_writers_messages(
    backend_url: str, durability: str, opened_first: bool
) -> None:
    url, config = backend_url, {"configurable": {"thread_id": "t"}}
    with KeepstateSaver(url) as first, KeepstateSaver(url) as second:
        other = _graph(second, lambda state: {"messages": [AIMessage("reply-b", id=uuid.uuid4().hex)]})
        if opened_first:
            other.invoke({"messages": [_message("opening")]}, config, durability=durability)
        raced: list[bool] = []

        def node(state: MessagesState) -> dict[str, Any]:
            if not raced:
                raced.append(True)
                other.invoke({"messages": [_message("from-b")]}, config, durability=durability)
            return {"messages": [AIMessage("reply-a", id=uuid.uuid4().hex)]}

        graph = _graph(first, node)
        graph.invoke({"messages": [_message("from-a")]}, config, durability=durability)
        expected = {"from-a", "reply-a", "from-b", "reply-b"} | ({"opening", "reply-b"} if opened_first else set())
        for reader in (graph, other):
            texts = _texts(reader, config)
            assert set(texts) == expected and texts.count("from-a") == texts.count("from-b") == 1, texts
        graph.invoke({"messages": [_message("later")]}, config, durability=durability)
        assert _texts(other, config)[-2:] == ["later", "reply-a"]
        assert len(_texts(other, config)) == len(expected) + (3 if opened_first else 2)


def test_time_travel_from_an_older_checkpoint_forks_without_merging(tmp_path: Path) -> None:
    config = {"configurable": {"thread_id": "t"}}
    with KeepstateSaver(f"sqlite:///{tmp_path / 'store.db'}") as saver:
        graph = _graph(saver, lambda state: {"messages": []})
        graph.invoke({"messages": [_message("one")]}, config)
        older = graph.get_state(config).config
        graph.invoke({"messages": [_message("two")]}, config)
        graph.invoke({"messages": [_message("instead")]}, older)
        assert _texts(graph, config) == ["one", "instead"]
        assert "two" in [
            text
            for snapshot in graph.get_state_history(config)
            for text in (message.content for message in snapshot.values.get("messages", []))
        ]


class _Rival:
    """Another process that moves the thread's head (rewrites it, a new version) just before each of the
    saver's next ``times`` guarded commits, so each of them meets a real VersionConflict from the store."""

    def __init__(self, saver: KeepstateSaver, monkeypatch: pytest.MonkeyPatch, times: float) -> None:
        self.moved, self.times, self._commit = 0, times, saver._commit
        monkeypatch.setattr(saver, "_commit", self.commit)

    def commit(self, scope: Any, *args: Any) -> None:
        if self.moved < self.times:
            head = keys.head(args[2])  # (thread_id, thread_key, ns, ...)
            scope.put(head, scope.get(head))
            self.moved += 1
        self._commit(scope, *args)


def test_a_put_that_loses_the_head_race_dozens_of_times_still_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(saver_module, "PUT_BACKOFF_MAX_S", 0.001)
    with _after_a_first_turn(tmp_path) as (saver, graph, config):
        rival = _Rival(saver, monkeypatch, times=100)  # more than a bound of 64 tries allowed
        graph.invoke({"messages": [_message("second")]}, config)
        assert rival.moved == 100
        assert _texts(graph, config) == ["first", "reply", "second", "reply"]


def test_a_put_gives_up_with_a_conflict_when_the_head_never_stops_moving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(saver_module, "PUT_BACKOFF_MAX_S", 0.001)
    monkeypatch.setattr(saver_module, "PUT_PATIENCE_S", 0.2)
    with _after_a_first_turn(tmp_path) as (saver, graph, config):
        rival = _Rival(saver, monkeypatch, times=float("inf"))
        with pytest.raises(VersionConflict, match=r"kept moving for 0\.2 s"):
            graph.invoke({"messages": [_message("second")]}, config)
        assert rival.moved > 1
        assert _texts(graph, config) == ["first", "reply"]  # nothing of the refused put is stored


HANG_S = 60
"""Bounds a wait for something that must happen, so a broken promise fails instead of hanging."""


class _Ticking:
    """A stand-in for the ``time`` module whose ``monotonic`` moves ``tick`` seconds per reading."""

    def __init__(self, tick: float) -> None:
        self.tick, self.now = tick, 0.0

    def monotonic(self) -> float:
        self.now += self.tick
        return self.now


def _head_scope(saver: KeepstateSaver, thread_id: str = "t") -> Any:
    return saver._thread(keys.thread_key(thread_id))


def _claim_head(saver: KeepstateSaver, token: str) -> None:
    """Another writer's claim on the root namespace's head, as turns.Turn.claim writes it."""
    scope = _head_scope(saver)
    scope.put(keys.head(""), {**scope.get(keys.head("")), turns.CLAIM: token})


def test_a_put_waits_for_another_writers_claim_and_lands_once_it_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(turns, "CLAIM_PATIENCE_S", 3600.0)  # only the release ends the wait, never the clock
    with _after_a_first_turn(tmp_path) as (saver, graph, config):
        _claim_head(saver, "another-writer")
        assert _texts(graph, config) == ["first", "reply"]  # a claim moves no checkpoint
        committed_after_release: list[bool] = []
        commit, waits, honouring = saver._commit, turns.Turn.waits, threading.Event()

        def watched_waits(turn: turns.Turn, head: Any) -> bool:
            waiting = waits(turn, head)
            if waiting:
                honouring.set()
            return waiting

        def watched_commit(*args: Any) -> None:  # the head as this commit finds it: the claim is gone
            committed_after_release.append(_head_scope(saver).get(keys.head("")).get(turns.CLAIM) is None)
            commit(*args)

        def release() -> None:  # what the claimant's commit does: the head without the claim
            assert honouring.wait(HANG_S), "the put never saw the claim"  # released only once it waits
            scope = _head_scope(saver)
            scope.put(
                keys.head(""), {key: value for key, value in scope.get(keys.head("")).items() if key != turns.CLAIM}
            )

        monkeypatch.setattr(saver, "_commit", watched_commit)
        monkeypatch.setattr(turns.Turn, "waits", watched_waits)
        releaser = threading.Thread(target=release)
        releaser.start()
        graph.invoke({"messages": [_message("second")]}, config)
        releaser.join()
        assert committed_after_release and all(committed_after_release), committed_after_release
        assert _texts(graph, config) == ["first", "reply", "second", "reply"]


def test_a_claim_whose_writer_stopped_delays_the_others_by_the_patience_and_no_longer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The put's own clock (turns.time) is one the test moves a tick per reading: it honours the stopped
    writer's claim while that clock says less than the patience has passed, and goes on at the first
    reading that says it has."""
    clock, readings = _Ticking(0.01), list[tuple[float, bool]]()
    monkeypatch.setattr(turns, "CLAIM_PATIENCE_S", 0.2)
    monkeypatch.setattr(turns, "time", clock)
    waits = turns.Turn.waits

    def watched(turn: turns.Turn, head: Any) -> bool:
        waiting = waits(turn, head)
        if turn._honoured is not None:
            readings.append((clock.now - turn._honoured[1], waiting))
        return waiting

    monkeypatch.setattr(turns.Turn, "waits", watched)
    with _after_a_first_turn(tmp_path) as (saver, graph, config):
        _claim_head(saver, "a-writer-that-stopped")
        graph.invoke({"messages": [_message("second")]}, config)
        honoured = [since for since, waiting in readings if waiting]
        went_on = next(since for since, waiting in readings if not waiting)
        assert honoured and max(honoured) < turns.CLAIM_PATIENCE_S <= went_on < turns.CLAIM_PATIENCE_S + 0.05
        assert _texts(graph, config) == ["first", "reply", "second", "reply"]
        assert turns.CLAIM not in _head_scope(saver).get(keys.head(""))  # its commit replaced the stale claim


def test_a_put_that_keeps_losing_claims_the_head_and_then_commits_against_its_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(saver_module, "PUT_BACKOFF_MAX_S", 0.001)
    with _after_a_first_turn(tmp_path) as (saver, graph, config):
        heads_at_commit: list[dict[str, Any]] = []
        rival = _Rival(saver, monkeypatch, times=turns.LOSSES_BEFORE_CLAIM)
        commit = rival.commit

        def watched(scope: Any, *args: Any) -> None:
            heads_at_commit.append(scope.get(keys.head(args[2])))
            commit(scope, *args)

        monkeypatch.setattr(saver, "_commit", watched)
        graph.invoke({"messages": [_message("second")]}, config)
        claimed = [turns.CLAIM in head for head in heads_at_commit]
        assert claimed[: turns.LOSSES_BEFORE_CLAIM + 1] == [False] * turns.LOSSES_BEFORE_CLAIM + [True], claimed
        assert _texts(graph, config) == ["first", "reply", "second", "reply"]
        assert turns.CLAIM not in _head_scope(saver).get(keys.head(""))
