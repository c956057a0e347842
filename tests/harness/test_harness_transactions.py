"""Transactions and table prefixes of the harness store, on every backend it runs on."""

from __future__ import annotations

import threading

import pytest
from harness_support import HARNESS_BACKENDS

from keepstate.errors import InvalidValue
from keepstate.harness import Done, HarnessStore, LogAppend, open_harness_store

pytestmark = pytest.mark.parametrize("backend_url", HARNESS_BACKENDS, indirect=True)


class Boom(Exception):
    pass


def write_a_bit_of_everything(store: HarnessStore, session: str) -> None:
    store.create_session(id=session, state={"n": 1})
    store.enqueue(session=session, id="op", input={"x": 1})
    store.start(session, "op")
    store.append(session, "messages", [LogAppend({"text": "long enough to span rows"}, id="m")])


def assert_nothing_of(store: HarnessStore, session: str) -> None:
    assert store.session(session) is None
    assert store.operation(session, "op") is None
    assert store.read(session, "messages") == [] and store.end(session, "messages") == 0


def test_a_with_block_commits_together(store: HarnessStore) -> None:
    with store.transaction():
        write_a_bit_of_everything(store, "s")
        assert store.end("s", "messages") == 1  # reads inside see the transaction's writes
    op = store.operation("s", "op")
    assert op is not None and op.status == "running"
    assert store.end("s", "messages") == 1


def test_an_exception_rolls_the_whole_block_back(store: HarnessStore) -> None:
    store.create_session(id="kept")
    with pytest.raises(Boom), store.transaction():
        write_a_bit_of_everything(store, "s")
        store.set_session_state("kept", "changed")
        raise Boom
    assert_nothing_of(store, "s")
    kept = store.session("kept")
    assert kept is not None and kept.state is None


def test_transaction_of_a_function_returns_its_value_or_rolls_back(store: HarnessStore) -> None:
    def work() -> int:
        write_a_bit_of_everything(store, "s")
        return 42

    assert store.transaction(work) == 42
    assert store.session("s") is not None

    def failing() -> None:
        write_a_bit_of_everything(store, "t")
        raise Boom

    with pytest.raises(Boom):
        store.transaction(failing)
    assert_nothing_of(store, "t")


def test_a_failed_inner_transaction_undoes_only_itself(store: HarnessStore) -> None:
    with store.transaction():
        store.create_session(id="outer")
        with pytest.raises(Boom), store.transaction():
            write_a_bit_of_everything(store, "inner")
            raise Boom
        store.append("outer", "log", [LogAppend("x")])
    assert store.session("outer") is not None and store.end("outer", "log") == 1
    assert_nothing_of(store, "inner")


def test_a_refused_value_inside_a_transaction_writes_nothing_of_that_call(store: HarnessStore) -> None:
    with store.transaction():
        store.append("s", "log", [LogAppend("one")])
        with pytest.raises(InvalidValue):
            store.append("s", "log", [LogAppend("two"), LogAppend(float("nan"))])
        store.settle("s", "missing", Done())
    assert [e.data for e in store.read("s", "log")] == ["one"]


def test_another_thread_does_not_see_an_open_transaction(store: HarnessStore) -> None:
    seen: list[object] = []
    with store.transaction():
        store.create_session(id="s")
        reader = threading.Thread(target=lambda: seen.append(store.session("s")))
        reader.start()
        reader.join(0.5)
    reader.join(10)
    assert not reader.is_alive()
    assert seen in ([None], [store.session("s")])  # blocked until commit (memory) or read the old snapshot
    assert store.session("s") is not None


def test_prefixes_keep_stores_apart_in_one_database(backend_url: str) -> None:
    with open_harness_store(backend_url, prefix="one_") as one, open_harness_store(backend_url, prefix="two_") as two:
        write_a_bit_of_everything(one, "s")
        assert_nothing_of(two, "s")
        assert two.sessions() == [] and two.operations() == []
        assert two.enqueue(session="s", id="op", input=None).accepted is True
        two.append("s", "messages", [LogAppend("two's")])
        assert [e.data for e in one.read("s", "messages")] == [{"text": "long enough to span rows"}]


def test_reopening_keeps_everything(backend_url: str) -> None:
    with open_harness_store(backend_url) as first:
        write_a_bit_of_everything(first, "s")
        op = first.operation("s", "op")
    with open_harness_store(backend_url) as second:
        assert second.operation("s", "op") == op
        assert [e.id for e in second.read("s", "messages")] == ["m"]
