"""KeepstateStore's promises beyond langgraph-checkpoint-sqlite's own tests, on every backend.

The upstream BaseStore tests (test_upstream_suites.py) prove LangGraph's behaviour on a SQLite
file. These prove what docs/integrations.md adds, on memory, SQLite, PostgreSQL and Redis: TTL
exact on read with no sweep at all, refresh moving keepstate's own expiry (and only when asked),
``created_at`` kept across puts, items readable under the documented keepstate key, names of any
characters and any length, batches past keepstate's 100 writes, a bad op writing nothing,
``update`` as an atomic read-modify-write, the console's session, and the import hygiene.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError, PutOp, SearchOp

import keepstate
from backends import declaring
from keepstate.integrations.langgraph import store_layout, store_query
from keepstate.integrations.langgraph.store import AGENT, SESSION, AsyncKeepstateStore, KeepstateStore
from keepstate.platform import open_platform
from keepstate.platform.models import Caller

EVERY_BACKEND = pytest.mark.parametrize("backend_url", declaring(), indirect=True)
SECOND = 1 / 60  # LangGraph TTLs are in minutes
LONG_TTL = 10.0  # minutes: no stall of a loaded machine outlives it, for an item that must still be there
HANG_S = 60
"""Bounds a wait for something that must happen, so a broken store fails instead of hanging."""


@pytest.fixture
def opened(backend_url: str) -> Iterator[keepstate.Store]:
    with keepstate.open(backend_url) as store:
        yield store


def scope_of(store: keepstate.Store) -> keepstate.Scope:
    return store.scope("session", agent=AGENT, id=SESSION)


@EVERY_BACKEND
def test_an_expired_item_is_gone_from_every_read_with_no_sweep(opened: keepstate.Store) -> None:
    store = KeepstateStore.from_store(opened, ttl={"default_ttl": 0.4 * SECOND})
    store.put(("docs", "ada"), "short", {"v": 1})
    store.put(("docs", "ada"), "kept", {"v": 2}, ttl=None)
    store.put(("docs", "ada"), "long", {"v": 3}, ttl=LONG_TTL)  # a TTL'd item still live is read
    assert store.get(("docs", "ada"), "long") is not None
    time.sleep(0.8)  # past the short item's expiry
    assert store.get(("docs", "ada"), "short") is None
    assert sorted(item.key for item in store.search(("docs",))) == ["kept", "long"]
    store.delete(("docs", "ada"), "kept")
    store.delete(("docs", "ada"), "long")
    assert store.list_namespaces(prefix=("docs",)) == []


@EVERY_BACKEND
def test_refresh_on_read_moves_keepstates_expiry_only_when_asked(opened: keepstate.Store) -> None:
    store = KeepstateStore.from_store(opened, ttl={"default_ttl": 10, "refresh_on_read": True})
    store.put(("docs",), "report", {"v": 1})
    key = store_layout.stored_key(("docs",), "report")
    first = scope_of(opened).expires_at(key)
    assert first is not None
    time.sleep(0.05)
    store.get(("docs",), "report", refresh_ttl=False)
    assert scope_of(opened).expires_at(key) == first
    store.get(("docs",), "report")
    refreshed = scope_of(opened).expires_at(key)
    assert refreshed is not None and refreshed > first
    time.sleep(0.05)
    store.search(("docs",))
    later = scope_of(opened).expires_at(key)
    assert later is not None and later > refreshed
    item = store.get(("docs",), "report", refresh_ttl=False)
    assert item is not None and item.value == {"v": 1}  # a refresh never changes the value
    read_before = scope_of(opened).get_versioned(key)
    store.delete(("docs",), "report")
    store._refresh(key, read_before)  # a refresh of what a read saw before the delete: a lost race
    assert store.get(("docs",), "report") is None and scope_of(opened).get(key) is None


@EVERY_BACKEND
def test_an_item_is_readable_json_under_its_documented_key(opened: keepstate.Store) -> None:
    store = KeepstateStore.from_store(opened)
    store.put(("memories", "user-1"), "a1b2", {"food": "pizza"})
    first = store.get(("memories", "user-1"), "a1b2")
    time.sleep(0.01)
    store.put(("memories", "user-1"), "a1b2", {"food": "ramen"})
    second = store.get(("memories", "user-1"), "a1b2")
    assert first is not None and second is not None
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    stored = scope_of(opened).get("memories:user-1:a1b2")
    assert stored == {
        "namespace": ["memories", "user-1"],
        "key": "a1b2",
        "value": {"food": "ramen"},
        "created_at": first.created_at.isoformat(),
        "updated_at": second.updated_at.isoformat(),
        "ttl_minutes": None,
    }


@EVERY_BACKEND
def test_a_search_sees_every_change_and_changing_a_result_changes_nothing(opened: keepstate.Store) -> None:
    store, other = KeepstateStore.from_store(opened), KeepstateStore.from_store(opened)  # two caches
    store.put(("m",), "a", {"v": 1})
    assert [item.value for item in store.search(("m",))] == [{"v": 1}]
    other.put(("m",), "a", {"v": 2})
    assert [item.value for item in store.search(("m",))] == [{"v": 2}]
    store.search(("m",))[0].value["v"] = 99
    assert [item.value for item in store.search(("m",), filter={"v": 2})] == [{"v": 2}]
    other.delete(("m",), "a")
    assert store.search(("m",)) == []
    other.put(("m",), "a", {"v": 3})
    assert [item.value for item in store.search(("m",))] == [{"v": 3}]


NAMES = [
    (("users", "ada lovelace", "notes"), "2026-12-01/todo.md"),
    (("ünï", "中文", "star*", "a%b", "user_1", "colon:ed"), "key:with:colons_and_underscores"),
    (("emoji 🦜",), ""),
    (("deep", *(f"level-{n}-" + "x" * 20 for n in range(12))), "k" * 300),
]


@EVERY_BACKEND
def test_names_of_any_characters_and_length_round_trip(opened: keepstate.Store) -> None:
    store = KeepstateStore.from_store(opened)
    for namespace, key in NAMES:
        store.put(namespace, key, {"where": list(namespace), "key": key})
    assert any("__" in stored for stored, _ in scope_of(opened).keys()), "the long name was not hashed"
    for namespace, key in NAMES:
        item = store.get(namespace, key)
        assert item is not None and (item.namespace, item.key) == (namespace, key)
        assert [(hit.namespace, hit.key) for hit in store.search(namespace)] == [(namespace, key)]
        assert [(hit.key) for hit in store.search((*namespace[:-1], "other"))] == []
    assert sorted(store.list_namespaces(limit=100)) == sorted(namespace for namespace, _ in NAMES)
    deep = NAMES[-1][0]
    assert store.list_namespaces(prefix=deep[:9], limit=100) == [deep]
    assert store.list_namespaces(prefix=deep[:3], max_depth=2, limit=100) == [deep[:2]]


@EVERY_BACKEND
def test_a_batch_past_keepstates_100_writes_lands_and_a_bad_op_writes_nothing(opened: keepstate.Store) -> None:
    store = KeepstateStore.from_store(opened)
    store.batch([PutOp(("bulk",), f"k{n:03}", {"n": n}) for n in range(250)])
    found = store.search(("bulk",), limit=300, filter={"n": {"$gte": 100}})
    assert sorted(item.key for item in found) == [f"k{n:03}" for n in range(100, 250)]
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.batch([PutOp(("bulk",), "late", {"n": -1}), SearchOp(("bulk",), filter={"n')": 1})])
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("bulk",), "late", {"n": -1}), PutOp(("a.b",), "k", {})])
    assert store.get(("bulk",), "late") is None


@EVERY_BACKEND
def test_update_reads_changes_and_writes_one_item_atomically(opened: keepstate.Store) -> None:
    store = KeepstateStore.from_store(opened)
    seen: list[Any] = []

    def add(value: dict[str, Any] | None) -> dict[str, Any]:
        seen.append(value)
        return {"count": (value or {"count": 0})["count"] + 1}

    assert store.update(("counters",), "visits", add) == {"count": 1}
    assert store.update(("counters",), "visits", add) == {"count": 2}
    assert seen == [None, {"count": 1}]
    assert store.update(("counters",), "visits", lambda value: None) is None
    assert store.get(("counters",), "visits") is None
    with pytest.raises(InvalidNamespaceError):
        store.update(("langgraph",), "k", add)


@EVERY_BACKEND
async def test_the_async_store_keeps_the_same_items_and_refuses_sync_calls_on_its_loop(backend_url: str) -> None:
    async with AsyncKeepstateStore(backend_url, ttl={"default_ttl": 0.4 * SECOND}) as store:
        await store.setup()
        await store.aput(("docs",), "short", {"v": 1})
        await store.aput(("docs",), "kept", {"v": 2}, ttl=None)
        bump = await store.aupdate(("docs",), "kept", lambda value: {"v": (value or {})["v"] + 1}, ttl=None)
        assert bump == {"v": 3}
        with pytest.raises(asyncio.InvalidStateError):
            store.get(("docs",), "kept")
        await asyncio.sleep(0.8)
        assert [item.key for item in await store.asearch(("docs",))] == ["kept"]
        assert await asyncio.to_thread(store.get, ("docs",), "short") is None  # other threads may call it
        task = await store.start_ttl_sweeper(sweep_interval_minutes=0.05 * SECOND)
        await asyncio.sleep(0.2)
        assert await store.stop_ttl_sweeper(timeout=HANG_S) and task.done()


@pytest.mark.parametrize("backend_url", declaring(), indirect=True)
async def test_thousands_of_concurrent_calls_on_one_loop_all_land(backend_url: str) -> None:
    async with AsyncKeepstateStore(backend_url) as store:  # one tick's calls are one abatch, not a pool each
        await asyncio.gather(*(store.aput(("load", str(n % 4)), f"k{n}", {"n": n}) for n in range(2000)))
        found = await asyncio.gather(*(store.aget(("load", str(n % 4)), f"k{n}") for n in range(2000)))
    assert [item.value["n"] if item else None for item in found] == list(range(2000))


@pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
async def test_setup_makes_the_store_a_session_the_console_lists(backend_url: str) -> None:
    with KeepstateStore(backend_url) as store:
        store.setup()
        platform = await open_platform(backend_url)
        try:
            agents = await platform.session_agents(Caller("default", "admin", "key_admin"), SESSION)
        finally:
            await platform.aclose()
    assert agents == [AGENT]


class Turn(TypedDict):
    said: str


def test_a_graph_compiled_with_the_store_reads_and_writes_it(tmp_path: Any) -> None:
    def remember(state: Turn, *, store: BaseStore) -> dict[str, Any]:
        seen = store.get(("memories", "ada"), "said")
        store.put(("memories", "ada"), "said", {"all": [*(seen.value["all"] if seen else []), state["said"]]})
        return {}

    builder = StateGraph(Turn)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    with KeepstateStore(f"sqlite:///{tmp_path / 'graph.db'}") as store:
        graph = builder.compile(store=store)
        for said in ("hi", "again"):
            graph.invoke({"said": said})
        item = store.get(("memories", "ada"), "said")
    assert item is not None and item.value == {"all": ["hi", "again"]}


def test_from_store_shares_the_store_and_close_leaves_it_open(tmp_path: Any) -> None:
    with keepstate.open(f"sqlite:///{tmp_path / 'shared.db'}") as opened:
        KeepstateStore.from_store(opened, session_id="team-memory").close()
        KeepstateStore.from_store(opened, session_id="team-memory").put(("a",), "k", {"v": 1})
        assert opened.scope("session", agent=AGENT, id="team-memory").get("a:k")["value"] == {"v": 1}


def test_the_sweeper_thread_starts_and_stops(tmp_path: Any) -> None:
    with KeepstateStore(
        f"sqlite:///{tmp_path / 's.db'}", ttl={"default_ttl": 0.1 * SECOND, "sweep_interval_minutes": 0.05 * SECOND}
    ) as store:
        assert store.start_ttl_sweeper().done() is False
        assert store.start_ttl_sweeper() is store.start_ttl_sweeper()
        assert store.stop_ttl_sweeper(timeout=HANG_S)
    without = KeepstateStore("memory://")
    assert without.start_ttl_sweeper().done()  # no TTL config: nothing to sweep, as SqliteStore
    without.close()


FILTERS: list[tuple[dict[str, Any], bool]] = [
    ({"tag": "a"}, True),
    ({"tag": "b"}, False),
    ({"n": 3}, True),
    ({"n": 3.0}, True),
    ({"flag": True}, True),
    ({"flag": 1}, False),
    ({"one": True}, False),
    ({"missing": None}, True),
    ({"user.name": "ada"}, True),
    ({"user.name": {"$ne": "bob"}}, True),
    ({"missing": {"$ne": "x"}}, False),
    ({"n": {"$gt": 2, "$lte": 3}}, True),
    ({"n": {"$lt": float("inf")}}, True),
    ({"n": {"$eq": float("nan")}}, False),
    ({"tag": {"$gte": "a"}}, True),
    ({"tag": {"$gt": 1}}, False),
    ({"tags": ["x", "y"]}, True),
    ({"tags": ["y", "x"]}, False),
]


@pytest.mark.parametrize(("filter", "expected"), FILTERS)
def test_filters_mean_what_sqlite_store_filters_mean(filter: dict[str, Any], expected: bool) -> None:
    value = {"tag": "a", "n": 3, "flag": True, "one": 1, "user": {"name": "ada"}, "tags": ["x", "y"]}
    store_query.check_filter(filter)
    assert store_query.matches(value, filter) is expected


@pytest.mark.parametrize("filter", [{"a') OR 1": 1}, {"a": {"$regex": "x"}}])
def test_a_filter_it_cannot_apply_is_refused(filter: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"Invalid filter key|Unsupported operator"):
        store_query.check_filter(filter)


def test_keepstate_never_imports_langgraph_and_a_missing_extra_says_what_to_install() -> None:
    plain = "import sys, keepstate; print(any(name.startswith('langgraph') for name in sys.modules))"
    assert (
        subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
    blocked = "import sys; sys.modules['langgraph.store.base'] = None\nimport keepstate.integrations.langgraph.store"
    result = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "pip install 'keepstate[langgraph]'" in result.stderr
