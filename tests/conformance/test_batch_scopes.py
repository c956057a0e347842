"""Batches across scopes: atomic where the store declares ``cross_scope_batches``, and on a store that
keeps a batch in one hash slot (a Redis Cluster) refused before anything is written, never half-applied."""

from __future__ import annotations

import itertools

import pytest

import keepstate
from backends import declaring, lacking
from keepstate.errors import InvalidRequest
from keepstate.stores.redis.slots import slot_of

across = pytest.mark.parametrize("backend_url", declaring("cross_scope_batches"), indirect=True)
one_slot = pytest.mark.parametrize("backend_url", lacking("cross_scope_batches"), indirect=True)


@across
def test_a_batch_writes_two_scopes_together(store: keepstate.Store) -> None:
    run, outbox = store.scope("run", agent="chat", id="r-1"), store.scope("agent", agent="chat")
    with run.batch() as b:
        b.incr("sent")
        b.on(outbox).append("outbox", [{"to": "x"}])
    assert run.get("sent") == 1 and outbox.get("outbox") == [{"to": "x"}]


@one_slot
def test_a_batch_spanning_slots_is_refused_before_anything_is_written(store: keepstate.Store) -> None:
    run, outbox = store.scope("run", agent="chat", id="r-1"), store.scope("agent", agent="chat")
    run.put("kept", 1)
    with pytest.raises(InvalidRequest) as refused, run.batch() as b:
        b.put("kept", 2)
        b.append("log", ["a"])
        b.on(outbox).append("outbox", [{"to": "x"}])
    assert refused.value.code == "invalid_request" and refused.value.status == 400
    assert refused.value.details == {"index": 2}
    assert "Redis Cluster" in refused.value.message and "redis+cluster://" in refused.value.message
    assert run.get_versioned("kept") == (1, 1) and run.get("log") is None and outbox.get("outbox") is None


@one_slot
def test_a_batch_whose_scopes_share_a_slot_is_atomic_all_the_same(store: keepstate.Store) -> None:
    first = store.scope("session", agent="chat", id="s-0")
    slot = slot_of("{default/session/chat/s-0}")
    twin = next(f"s-{n}" for n in itertools.count(1) if slot_of(f"{{default/session/chat/s-{n}}}") == slot)
    second = store.scope("session", agent="chat", id=twin)
    with first.batch() as b:
        b.put("a", 1)
        b.on(second).append("log", ["b"])
    assert b.results == [1, keepstate.Appended(1, 1)]
    assert first.get("a") == 1 and second.get("log") == ["b"]
