"""The Redis backend on a Redis Cluster beyond the shared contract: the URL, where keys land, and the
cluster's own failures — a master that stops answering, a slot that moves, a failover.

The conformance suites (state, batches, sessions, several processes) run on the session's local
cluster through ``backend_url``; the tests here that stop a node or move a slot make a private
cluster, so no other test sees it. Nothing waits on time: each phase waits for what the writers
report (events), and a deadline only turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

import keepstate
from cliproc import assert_one_line_error, run_cli
from keepstate.errors import Unavailable
from keepstate.scope import AsyncScope, scope_namespace
from keepstate.stores import capabilities_of, open_database
from keepstate.stores.redis import RedisClusterDatabase
from keepstate.stores.redis.db import open_cluster
from keepstate.stores.redis.slots import slot_of
from keepstate.stores.redis.state import RedisState
from redis_cluster import LocalCluster, start_cluster

HANG_S = 120.0
"""Only a hang is bounded: a call or a phase that takes longer than this has hung."""


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A private three-master cluster this test may stop nodes of or move slots in."""
    private = start_cluster()
    yield private
    private.destroy()


def session_on(cluster: LocalCluster, node: int) -> str:
    """A session id whose scope's keys live on master ``node``."""
    for n in itertools.count():
        if cluster.node_of_slot(slot_of("{" + scope_namespace("session", "chat", f"s-{n}") + "}")) == node:
            return f"s-{n}"
    raise AssertionError("unreachable")


# ---------------------------------------------------------------- the URL


def test_urls_name_seeds_and_a_prefix_and_bad_ones_say_why() -> None:
    assert capabilities_of("redis+cluster://h:7000").cross_scope_batches is False
    assert capabilities_of("rediss+cluster://h:7000").leases is True
    client, prefix = open_cluster("redis+cluster://u:pw@a:7000,b:7001,[::1]:7002/0?prefix=app:")
    assert prefix == "app:" and {(n.host, n.port) for n in client.startup_nodes} == {
        ("a", 7000),
        ("b", 7001),
        ("::1", 7002),
    }
    assert client.get_connection_kwargs()["password"] == "pw"
    for bad, why in [
        ("redis+cluster://a:7000/3", "one database"),
        ("redis+cluster://a:x", "host:port"),
        ("redis+cluster://a:7000/?prefix=x{y}:", "may not hold"),
        ("redis+cluster://a:7000/?nonsense=1", "not one redis-py knows"),
    ]:
        with pytest.raises(ValueError, match=why):
            open_cluster(bad)


async def test_an_unreachable_cluster_is_unavailable() -> None:
    database = open_database("redis+cluster://127.0.0.1:1/?prefix=x:")
    with pytest.raises(Unavailable):
        await database.state()
    await database.aclose()


async def test_the_client_never_resends_a_command(redis_cluster_url: str) -> None:
    database = open_database(redis_cluster_url)
    assert isinstance(database, RedisClusterDatabase)
    state = await database.state()
    assert isinstance(state.client, redis.asyncio.RedisCluster) and state.client.retry.get_retries() == 0
    await database.aclose()


# ---------------------------------------------------------------- where keys land


async def test_calls_racing_a_new_clients_first_topology_read_all_land(redis_cluster_url: str) -> None:
    """Sixteen first calls at once on a store no call has used, to scopes on every master: each lands
    on its own master. redis-py's cluster client sent calls made during its first topology read to the
    wrong master (MOVED), then closed every connection, so some failed Unavailable."""
    store = keepstate.open(redis_cluster_url)
    try:
        scopes = [store.ascope("session", agent="chat", id=f"first-{n}") for n in range(16)]
        await asyncio.gather(*(scope.append("log", [n]) for n, scope in enumerate(scopes)))
        assert [await scope.get("log") for scope in scopes] == [[n] for n in range(16)]
    finally:
        await store.aclose()
        store.close()


async def test_one_scopes_keys_share_a_slot_and_scopes_spread_over_the_masters(
    redis_cluster_url: str, local_cluster: LocalCluster
) -> None:
    database = open_database(redis_cluster_url)
    state = await database.state()
    assert isinstance(state, RedisState)
    for n in range(60):
        ns = scope_namespace("session", "chat", f"s-{n}")
        await state.append(ns, "log", [b"1"], ttl_ms=60_000)
        await state.put(ns, "v", b"1")
    masters = {
        local_cluster.node_of_slot(state.names.slot(scope_namespace("session", "chat", f"s-{n}"))) for n in range(60)
    }
    assert len(masters) == 3
    prefix = state.names.prefix
    for port in local_cluster.ports:
        with redis.Redis(port=port) as node:
            names = [name.decode() for name in node.scan_iter(match=prefix + "*", count=1000)]
            slots = {name: slot_of(name) for name in names}
            owned = {local_cluster.node_of_slot(slot) for slot in slots.values()}
            assert owned <= {local_cluster.ports.index(port)}, "every key lives on the master of its slot"
            expiry_sets = [name for name in names if name.endswith(":expiry")]
            for expiry in expiry_sets:  # each lists only keys of its own slot
                assert {slot_of(member.decode()) for member in node.zrange(expiry, 0, -1)} == {slots[expiry]}
    assert await state.sweep() == 0
    await database.aclose()


# ---------------------------------------------------------------- a master stops answering


LOG_ROTATE = 10_000
"""A writer's appends go to a list per 10,000 of them (``log0``, ``log1``...): however long the others keep
going while a master is stopped, no list reaches the 1 MiB limit."""


def log_key(n: int) -> str:
    return f"log{n // LOG_ROTATE}"


async def logged(scope: AsyncScope) -> list[Any]:
    """Every writer's items of a scope, the lists in order (each writer's appends in its order)."""
    items: list[Any] = []
    index = 0
    while (part := await scope.get(f"log{index}")) is not None:
        items += part
        index += 1
    return items


@dataclass
class Writer:
    """Appends ``[writer, n]`` to one scope's lists until told to stop; what was acknowledged, what failed."""

    scope: AsyncScope
    sid: str
    name: int
    acked: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    progress: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, stop: asyncio.Event) -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            try:
                await asyncio.wait_for(self.scope.append(log_key(n), [[self.name, n]]), HANG_S)
                self.acked.append(n)
            except Unavailable as error:
                self.failed.append(n)
                self.errors.append(error)
            self.progress.set()

    async def until(self, test: object) -> None:
        """Wait (a hang bounded) until ``test()`` holds, checked after each of this writer's calls."""

        async def wait() -> None:
            while not test():  # type: ignore[operator]
                self.progress.clear()
                await self.progress.wait()

        await asyncio.wait_for(wait(), HANG_S)


async def test_a_stopped_master_fails_its_slots_fast_and_loses_nothing_acknowledged(cluster: LocalCluster) -> None:
    """SIGSTOP one master under load: its scopes' calls end Unavailable (never hang), the other masters'
    scopes keep working meanwhile, and after SIGCONT every acknowledged append is there exactly once."""
    victim = cluster.node_of_slot(0)  # the slot-0 master: redis-py's default node, the hardest case
    sids = [session_on(cluster, node) for node in range(3)]
    store = keepstate.open(cluster.url("stop:"))
    stop = asyncio.Event()
    writers = [
        Writer(store.ascope("session", agent="chat", id=sid), sid, name)
        for name, sid in enumerate(sid for sid in sids for _ in range(2))
    ]
    tasks = [asyncio.create_task(writer.run(stop)) for writer in writers]
    stopped = [w for w in writers if sids.index(w.sid) == victim]
    others = [w for w in writers if w not in stopped]
    try:
        for writer in writers:
            await writer.until(lambda w=writer: len(w.acked) >= 10)
        cluster.pause(victim)
        for writer in stopped:
            await writer.until(lambda w=writer: len(w.failed) >= 1)
        marks = {id(w): len(w.acked) for w in others}
        for writer in others:
            await writer.until(lambda w=writer: len(w.acked) >= marks[id(w)] + 20)
        assert all(not w.failed for w in others), "the other masters' scopes kept working"
        await _a_new_client_works_on_the_others(cluster, sids, victim)
    finally:
        cluster.resume(victim)
    for writer in stopped:
        mark = len(writer.acked)
        await writer.until(lambda w=writer, m=mark: len(w.acked) >= m + 5)  # back once it answers
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), HANG_S)
    for sid in sids:
        items = await logged(store.ascope("session", agent="chat", id=sid))
        for writer in (w for w in writers if w.sid == sid):
            mine = [n for w, n in items if w == writer.name]
            assert len(mine) == len(set(mine)), "nothing appended twice"
            assert set(writer.acked) <= set(mine), "every acknowledged append is there"
            assert set(mine) <= set(writer.acked) | set(writer.failed)
            assert mine == sorted(mine), "in each writer's order"
    await store.aclose()
    store.close()


async def _a_new_client_works_on_the_others(cluster: LocalCluster, sids: list[str], victim: int) -> None:
    """A process that opens the store while the master is stopped: the same answers as the old client."""
    fresh = keepstate.open(cluster.url("stop:"))
    try:
        for node, sid in enumerate(sids):
            scope = fresh.ascope("session", agent="chat", id=sid)
            if node == victim:
                with pytest.raises(Unavailable):
                    await asyncio.wait_for(scope.incr("fresh"), HANG_S)
            else:
                assert await asyncio.wait_for(scope.incr("fresh"), HANG_S) == 1
    finally:
        await fresh.aclose()
        fresh.close()


# ---------------------------------------------------------------- a slot moves


async def test_a_scope_whose_slot_moves_is_followed_by_ask_then_moved(cluster: LocalCluster) -> None:
    source, target = 0, 1
    sid = session_on(cluster, source)
    slot = slot_of("{" + scope_namespace("session", "chat", sid) + "}")
    store = keepstate.open(cluster.url("move:"))
    scope = store.ascope("session", agent="chat", id=sid)
    await scope.put("v", {"a": 1})
    await scope.append("log", [1, 2])
    await scope.incr("n", by=5)
    await scope.put("t", 1, ttl_seconds=600)  # the slot's expiry set moves with it
    cluster.begin_move(slot, source, target)
    header = f"move:{{{scope_namespace('session', 'chat', sid)}}}:h:v"  # one key moved, the index not yet
    cluster.move_keys(slot, source, target, only=[header])
    ns = scope_namespace("session", "chat", sid)
    for reads_unnamed_keys in (_listed(scope), (await store.async_state()).drop(ns)):
        with pytest.raises(Unavailable):  # Redis refuses a key gone already: never a short list, no half drop
            await asyncio.wait_for(reads_unnamed_keys, HANG_S)
    cluster.move_keys(slot, source, target)
    assert await _listed(scope) == ["log", "n", "t", "v"]
    assert await scope.get("v") == {"a": 1}  # the source answers ASK: read from the target
    assert await scope.tail("log", 2) == [1, 2]  # a script the target has not seen yet, sent whole
    done = {}
    for name, write in [("n", scope.incr("n")), ("log", scope.append("log", [3])), ("new", scope.put("new", 1))]:
        with contextlib.suppress(Unavailable):  # done on the target, or Unavailable (TRYAGAIN): never wrong
            done[name] = await asyncio.wait_for(write, HANG_S)
    cluster.end_move(slot, target)
    counted = 5 + ("n" in done)
    assert await scope.incr("n") == counted + 1  # the source answers MOVED: followed, and the map updated
    assert await scope.get("log") == ([1, 2, 3] if "log" in done else [1, 2])
    assert await scope.get_versioned("new") == ((1, 1) if "new" in done else (None, 0))
    assert await scope.expires_at("t") is not None and await scope.put("after", 2) == 1
    with redis.Redis(port=cluster.ports[target]) as node:
        assert node.exists(f"move:{{{scope_namespace('session', 'chat', sid)}}}:h:after") == 1
    await store.aclose()
    store.close()


async def _listed(scope: AsyncScope) -> list[str]:
    return [key async for key, _ in scope.keys()]


# ---------------------------------------------------------------- a failover


async def test_a_failover_under_load_is_followed_and_loses_nothing_when_the_replica_had_caught_up() -> None:
    """A manual failover (the replica catches up before it takes over) while a writer appends: the
    client follows the new master, and every acknowledged append is there once. (An automatic failover
    after a crash can lose the last acknowledged writes: replication is asynchronous, docs/deploy.md.)"""
    cluster = start_cluster(masters=3, replicas=1)
    try:
        master = cluster.node_of_slot(0)
        sid = session_on(cluster, master)
        store = keepstate.open(cluster.url("failover:"))
        stop = asyncio.Event()
        writer = Writer(store.ascope("session", agent="chat", id=sid), sid, 0)
        task = asyncio.create_task(writer.run(stop))
        await writer.until(lambda: len(writer.acked) >= 10)
        replica = cluster.replica_of(master)
        await asyncio.to_thread(cluster.fail_over, replica)
        assert cluster.node_of_slot(0) == replica
        mark = len(writer.acked)
        await writer.until(lambda: len(writer.acked) >= mark + 10)  # on the new master now
        stop.set()
        await asyncio.wait_for(task, HANG_S)
        items = [n for _, n in await logged(store.ascope("session", agent="chat", id=sid))]
        assert len(items) == len(set(items)) and set(writer.acked) <= set(items) <= set(writer.acked + writer.failed)
        assert items == sorted(items)
        await store.aclose()
        store.close()
    finally:
        cluster.destroy()


# ---------------------------------------------------------------- the command line


def test_export_and_import_move_a_cluster_store_and_bad_urls_say_why_in_one_line(
    local_cluster: LocalCluster, redis_cluster_url: str
) -> None:
    with keepstate.open(redis_cluster_url) as store:
        for n in range(30):
            scope = store.scope("session", agent="chat", id=f"s-{n}")
            scope.append("log", [n, {"n": n}])
            scope.put("gone", 1)
            scope.delete("gone")  # a tombstone travels too: its version never repeats
            scope.put("kept", n, ttl_seconds=3600)
    exported = run_cli("export", "--store", redis_cluster_url)
    assert exported.returncode == 0, exported.stderr
    target = local_cluster.url(f"copy{uuid.uuid4().hex[:8]}:")
    try:
        imported = run_cli("import", "--store", target, input=exported.stdout)
        assert imported.returncode == 0, imported.stderr
        with keepstate.open(target) as copy:
            for n in range(30):
                scope = copy.scope("session", agent="chat", id=f"s-{n}")
                assert scope.get_versioned("log") == ([n, {"n": n}], 1) and scope.get("kept") == n
                assert scope.put("gone", 2) == 2  # not 1: the tombstone kept version 1
    finally:
        local_cluster.delete_prefix(target.rpartition("prefix=")[2])
    for bad, needle in [("redis+cluster://127.0.0.1:1", "unavailable"), ("redis+cluster://a:b", "host:port")]:
        assert_one_line_error(run_cli("state", "get", "--store", bad, "--scope", "agent", "--agent", "a", "k"), needle)
