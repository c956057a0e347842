"""Sessions and operations of the harness store, on every backend it runs on."""

from __future__ import annotations

import pytest
from harness_support import HARNESS_BACKENDS

from keepstate.errors import InvalidRequest
from keepstate.harness import Done, HarnessStore, LogAppend, Unanswered

pytestmark = pytest.mark.parametrize("backend_url", HARNESS_BACKENDS, indirect=True)


def test_create_session_returns_the_existing_one_unchanged(store: HarnessStore) -> None:
    first = store.create_session(id="s1", state={"model": "x"})
    again = store.create_session(id="s1", parent="p", state={"model": "y"}, created_at=5)
    assert again == first
    assert first.state == {"model": "x"} and first.parent is None
    assert store.session("s1") == first


def test_created_at_may_be_given_and_orders_the_session_list(store: HarnessStore) -> None:
    store.create_session(id="new")
    store.create_session(id="imported", parent="new", created_at=1_000)
    store.create_session(id="older", created_at=500)
    assert [s.id for s in store.sessions()] == ["older", "imported", "new"]
    imported = store.session("imported")
    assert imported is not None and imported.created_at == 1_000 and imported.parent == "new"


def test_state_defaults_to_null_and_is_replaced(store: HarnessStore) -> None:
    created = store.create_session(id="s1")
    assert created.state is None
    assert store.set_session_state("s1", {"cursor": [1, "ü"]}) is True
    updated = store.session("s1")
    assert updated is not None and updated.state == {"cursor": [1, "ü"]}
    assert updated.updated_at >= created.updated_at
    assert store.set_session_state("absent", 1) is False
    assert store.session("absent") is None


def test_delete_session_takes_its_operations_and_logs_with_it(store: HarnessStore) -> None:
    for session in ("s1", "s2"):
        store.create_session(id=session)
        store.enqueue(session=session, id="op", input=session)
        store.append(session, "messages", [LogAppend({"text": "a long enough entry"}, id="m")])
    assert store.delete_session("s1") is True
    assert store.delete_session("s1") is False
    assert store.operations(session="s1") == [] and store.read("s1", "messages") == []
    assert store.end("s1", "messages") == 0 and store.entry("s1", "messages", "m") is None
    assert [s.id for s in store.sessions()] == ["s2"]
    assert len(store.operations(session="s2")) == 1 and store.end("s2", "messages") == 1


def test_enqueue_is_idempotent_on_session_and_id(store: HarnessStore) -> None:
    first, accepted = store.enqueue(session="s1", id="op-1", input={"prompt": "hi"}, meta={"try": 1})
    assert accepted is True
    assert (first.status, first.input, first.meta, first.result, first.reason) == (
        "queued",
        {"prompt": "hi"},
        {"try": 1},
        None,
        None,
    )
    second = store.enqueue(session="s1", id="op-1", input={"prompt": "other"})
    assert second.accepted is False and second.record == first
    assert store.operations() == [first]
    other_session = store.enqueue(session="s2", id="op-1", input=None)
    assert other_session.accepted is True and other_session.record.seq > first.seq


def test_seq_is_submission_order_across_the_store(store: HarnessStore) -> None:
    seqs = [store.enqueue(session=s, id=i, input=None).record.seq for s, i in [("a", "1"), ("b", "1"), ("a", "2")]]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert [(op.session, op.id) for op in store.operations()] == [("a", "1"), ("b", "1"), ("a", "2")]


def test_seq_is_never_reused_after_the_newest_operation_is_deleted(store: HarnessStore) -> None:
    store.enqueue(session="s", id="1", input=None)
    newest = store.enqueue(session="s", id="2", input=None).record
    assert store.delete_operation("s", "2") is True
    again = store.enqueue(session="s", id="2", input=None)
    assert again.accepted is True and again.record.seq > newest.seq
    store.delete_session("s")
    assert store.enqueue(session="t", id="3", input=None).record.seq > again.record.seq


def test_start_only_from_queued(store: HarnessStore) -> None:
    store.enqueue(session="s", id="op", input=None)
    assert store.start("s", "op") is True
    running = store.operation("s", "op")
    assert running is not None and running.status == "running"
    assert store.start("s", "op") is False
    assert store.operation("s", "op") == running
    assert store.start("s", "absent") is False


def test_requeue_only_from_running(store: HarnessStore) -> None:
    store.enqueue(session="s", id="op", input=None)
    assert store.requeue("s", "op") is False
    store.start("s", "op")
    assert store.requeue("s", "op") is True
    assert store.requeue("s", "op") is False
    op = store.operation("s", "op")
    assert op is not None and op.status == "queued"
    assert store.start("s", "op") is True


@pytest.mark.parametrize("started", [False, True])
def test_settle_from_queued_or_running_once(store: HarnessStore, started: bool) -> None:
    store.enqueue(session="s", id="op", input=None)
    if started:
        store.start("s", "op")
    assert store.settle("s", "op", Done(result={"text": "héllo"})) is True
    done = store.operation("s", "op")
    assert done is not None and done.status == "done" and done.result == {"text": "héllo"}
    assert done.reason is None and done.settled_at is not None
    assert store.settle("s", "op", Unanswered(reason="late")) is False
    assert store.settle("s", "op", Done(result=2)) is False
    assert store.start("s", "op") is False and store.requeue("s", "op") is False
    assert store.operation("s", "op") == done
    assert store.settle("s", "absent", Done()) is False


def test_unanswered_keeps_its_reason_and_a_null_result(store: HarnessStore) -> None:
    store.enqueue(session="s", id="op", input=None)
    assert store.settle("s", "op", Unanswered(reason="container stopped")) is True
    op = store.operation("s", "op")
    assert op is not None and (op.status, op.result, op.reason) == ("unanswered", None, "container stopped")


def test_delete_settled_keeps_open_operations_and_frees_ids(store: HarnessStore) -> None:
    for op in ("done", "gone", "running", "queued"):
        store.enqueue(session="s", id=op, input=op)
    store.enqueue(session="other", id="done", input=None)
    store.settle("s", "done", Done())
    store.settle("s", "gone", Unanswered("x"))
    store.settle("other", "done", Done())
    store.start("s", "running")
    assert store.delete_settled("s") == 2
    assert [op.id for op in store.operations(session="s")] == ["running", "queued"]
    assert store.operation("other", "done") is not None
    again = store.enqueue(session="s", id="done", input="second")
    assert again.accepted is True and again.record.status == "queued" and again.record.input == "second"
    assert store.delete_settled("s") == 0


def test_delete_operation_whatever_its_status(store: HarnessStore) -> None:
    store.enqueue(session="s", id="op", input=None)
    store.start("s", "op")
    assert store.delete_operation("s", "op") is True
    assert store.delete_operation("s", "op") is False
    assert store.operation("s", "op") is None


def test_set_operation_meta(store: HarnessStore) -> None:
    store.enqueue(session="s", id="op", input={"a": 1}, meta={"n": 1})
    assert store.set_operation_meta("s", "op", {"n": 2}) is True
    op = store.operation("s", "op")
    assert op is not None and op.meta == {"n": 2} and op.input == {"a": 1} and op.status == "queued"
    assert store.set_operation_meta("s", "absent", 1) is False


def test_operations_filter_by_session_and_status(store: HarnessStore) -> None:
    for session, op in [("a", "1"), ("b", "1"), ("a", "2"), ("a", "3")]:
        store.enqueue(session=session, id=op, input=None)
    store.start("a", "2")
    store.settle("a", "3", Done())

    def ids(**kw: object) -> list[tuple[str, str]]:
        return [(op.session, op.id) for op in store.operations(**kw)]  # type: ignore[arg-type]

    assert ids(session="a") == [("a", "1"), ("a", "2"), ("a", "3")]
    assert ids(status=["queued"]) == [("a", "1"), ("b", "1")]
    assert ids(session="a", status=["running", "done"]) == [("a", "2"), ("a", "3")]
    assert ids(status="done") == [("a", "3")]
    assert ids(status=[]) == []
    with pytest.raises(InvalidRequest):
        store.operations(status=["finished"])  # type: ignore[list-item]
