"""KeepstateSaver's maintenance while another process puts checkpoints to the same thread.

``delete_for_runs``, ``prune(keep_latest)`` and ``copy_thread`` each read the thread and then write
what they computed from it. Another saver's put is made to land exactly between that read and that
write (by construction: the read is wrapped), and the put is never undone: the head is not moved
back over it, its checkpoint is not deleted, and a copy's latest is a checkpoint the copy holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conversations import CheckpointerConversation
from langchain_core.messages import HumanMessage

from backends import declaring
from keepstate.integrations.langgraph import KeepstateSaver, keys

pytestmark = pytest.mark.parametrize("backend_url", declaring(), indirect=True)


@pytest.fixture
def savers(backend_url: str) -> Iterator[tuple[KeepstateSaver, KeepstateSaver]]:
    """The saver under test, and another one on the same store (another process's)."""
    with KeepstateSaver(backend_url) as mine, KeepstateSaver(backend_url) as theirs:
        yield mine, theirs


def say(saver: KeepstateSaver, thread: str, text: str, run: str | None = None) -> None:
    graph = CheckpointerConversation(saver, thread)._graph
    config: dict[str, Any] = {"configurable": {"thread_id": thread}, "metadata": {"run_id": run or uuid.uuid4().hex}}
    graph.invoke({"messages": [HumanMessage(content=text, id=uuid.uuid4().hex)]}, config)  # type: ignore[arg-type]


def texts(saver: KeepstateSaver, thread: str) -> list[str]:
    return CheckpointerConversation(saver, thread).texts()


def once(action: Callable[[], None]) -> Callable[[], None]:
    done: list[bool] = []

    def run() -> None:
        if not done:
            done.append(True)
            action()

    return run


def started(
    savers: tuple[KeepstateSaver, KeepstateSaver], thread: str, second_run: str | None = None
) -> tuple[KeepstateSaver, Callable[[], None]]:
    """``thread`` holding m1 and m2 (m2 of run ``second_run``), written by the saver under test; and
    the other saver's put of m3, made once, wherever the test calls it."""
    mine, theirs = savers
    say(mine, thread, "m1")
    say(mine, thread, "m2", run=second_run)
    return mine, once(lambda: say(theirs, thread, "m3"))


def test_delete_for_runs_never_moves_the_head_back_over_a_put_made_meanwhile(
    savers: tuple[KeepstateSaver, KeepstateSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, put_meanwhile = started(savers, "t", second_run="doomed")
    records, calls = mine._records, []

    def records_then_a_put(scope: Any, ns: str | None) -> Iterator[dict[str, Any]]:
        calls.append(ns)
        found = records(scope, ns)
        if len(calls) == 2:  # the second listing: the head's new checkpoint, chosen; then their put lands
            newest = next(found)
            put_meanwhile()
            yield newest
        yield from found

    monkeypatch.setattr(mine, "_records", records_then_a_put)
    mine.delete_for_runs(["doomed"])
    monkeypatch.undo()
    assert len(calls) == 2
    assert texts(mine, "t") == texts(savers[1], "t") == ["m1", "m3"]


def test_prune_keep_latest_never_deletes_a_put_made_meanwhile(
    savers: tuple[KeepstateSaver, KeepstateSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, put_meanwhile = started(savers, "t")
    latest = mine._latest

    def latest_then_a_put(scope: Any, ns: str) -> dict[str, Any] | None:
        record = latest(scope, ns)
        put_meanwhile()  # the kept checkpoint is chosen; their put lands before anything is deleted
        return record

    monkeypatch.setattr(mine, "_latest", latest_then_a_put)
    mine.prune(["t"])
    monkeypatch.undo()
    assert texts(mine, "t") == ["m1", "m2", "m3"]
    with KeepstateSaver(mine.store.url) as cold:  # nothing cached: every blob the latest needs is there
        assert texts(cold, "t") == ["m1", "m2", "m3"]


def test_copy_thread_copies_a_latest_checkpoint_whole_while_the_source_moves_on(
    savers: tuple[KeepstateSaver, KeepstateSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, put_meanwhile = started(savers, "source")
    thread = mine._thread

    class Listing:
        """The source scope, whose first listing of every key is followed by their put."""

        def __init__(self, scope: Any) -> None:
            self._scope = scope

        def __getattr__(self, name: str) -> Any:
            return getattr(self._scope, name)

        def keys(self, prefix: str = "") -> Iterator[tuple[str, int]]:
            yield from list(self._scope.keys(prefix))
            if prefix == "":
                put_meanwhile()

    monkeypatch.setattr(mine, "_thread", lambda key: Listing(thread(key)) if key == "source" else thread(key))
    mine.copy_thread("source", "copy")
    monkeypatch.undo()
    copy = mine.store.scope("session", agent=keys.AGENT, id="copy")
    head = copy.get(keys.head(""))
    assert copy.get(keys.checkpoint("", head["id"])) is not None, "the copy's head names a checkpoint it lacks"
    assert texts(mine, "copy") == ["m1", "m2"] and texts(mine, "source") == ["m1", "m2", "m3"]
    say(mine, "copy", "m4")
    assert texts(mine, "copy") == ["m1", "m2", "m4"]
