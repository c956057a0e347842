"""Writes whose answer was lost land once: the SDK (sync and async) against real ``keepstate serve``
processes on SQLite and on PostgreSQL, through ``LosingProxy``, which forwards a chosen request to the
server, lets it apply the write, and drops the SDK's connection before the answer reaches it.

The SDK retries with the same ``Idempotency-Key`` and the server answers the repeat with the first
answer, writing nothing: the item is appended once, the counter counts once, a pop pops one item and
returns it, a batch and an emit write once, a completion returns normally, a run is started once. The
state is read back straight from the server (not through the proxy). Which request is lost is chosen by
its route, never by timing; waits are bounded by HANG_S only so a broken promise fails, not hangs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from losing_proxy import LosingProxy, losing_proxy
from sdk_helpers import Keys

from backends import fresh_url
from keepstate.client import AsyncClient, AsyncInvocation, AsyncWorker, Client, Invocation, Run, Worker
from keepstate.errors import IdempotencyMismatch
from keepstate.scope import Scope
from serverproc import ServerInfo, running_server

HANG_S = 60
LONG_LEASE_S = 3600
"""No heartbeat comes within a test (the first is a third of the lease away)."""
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def sdk_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """This module's server (in place of conftest's), on a fresh store of each backend (PostgreSQL: a
    schema of its own, dropped afterwards)."""
    with (
        fresh_url(request.param, tmp_path_factory.mktemp("idempotency")) as store,
        running_server(store, lease=LONG_LEASE_S) as info,
    ):
        yield info


@pytest.fixture(scope="module")
def shared_proxy(sdk_server: ServerInfo) -> Iterator[LosingProxy]:
    with losing_proxy(sdk_server.url) as proxy:
        yield proxy


@pytest.fixture
def proxy(shared_proxy: LosingProxy) -> LosingProxy:
    """The module's proxy with no rules and nothing seen yet."""
    shared_proxy.reset()
    return shared_proxy


def assert_retried_with_one_key(proxy: LosingProxy, method: str, path_end: str) -> None:
    """The lost request and its retry: the same key, the first lost, the second answered."""
    first, retry, *more = proxy.requests(method, path_end)
    assert not more, f"{method} …{path_end} sent {2 + len(more)} times"
    assert first.key is not None and first.key == retry.key
    assert (first.lost, retry.lost) == (True, False)


# -- state writes by a caller: one table, both faces ---------------------------------------------


@dataclass(frozen=True)
class Case:
    """A write on a caller's agent-scope state: ``prepare`` (straight to the server), the call through the
    proxy (a scope method and its arguments, the same on ``Scope`` and ``AsyncScope``), the route whose
    answer is lost, what the call returns, and ``check`` on the state read back straight."""

    method: str
    args: tuple[Any, ...]
    lost: tuple[str, str]
    returns: Callable[[Any], Any]
    expected: Any
    check: Callable[[Any], Any]
    checked: Any
    prepare: Callable[[Any], Any] = lambda scope: None


CASES = {
    "append": Case(
        "append", ("log", ["a"]), ("POST", "/log/append"), lambda r: r.length, 1, lambda s: s.tail("log", 10), ["a"]
    ),
    "incr": Case("incr", ("n", 5), ("POST", "/n/incr"), lambda r: r, 5, lambda s: s.get("n"), 5),
    "pop": Case(
        "pop",
        ("q",),
        ("POST", "/q/pop"),
        lambda r: r,
        3,
        lambda s: s.tail("q", 10),
        [1, 2],
        prepare=lambda s: s.append("q", [1, 2, 3]),
    ),
    "put": Case(
        "put", ("k", {"v": 1}), ("PUT", "/state/k"), lambda r: r, 1, lambda s: s.get_versioned("k"), ({"v": 1}, 1)
    ),
    "patch": Case(
        "patch",
        ("doc", {"a": 1}),
        ("PATCH", "/state/doc"),
        lambda r: r,
        {"a": 1},
        lambda s: s.get_versioned("doc")[1],
        1,
    ),
}


@contextmanager
def straight(server: ServerInfo, agent: str) -> Iterator[Scope]:
    """The agent's scope read and written straight at the server, with the admin key."""
    with Client(server.url, key=server.admin_key) as client:
        yield client.state.agent(agent)


def arrange(server: ServerInfo, proxy: LosingProxy, agent: str, name: str) -> Case:
    """Case ``name``, prepared, its answer to be lost."""
    case = CASES[name]
    with straight(server, agent) as scope:
        case.prepare(scope)
    proxy.lose(*case.lost)
    return case


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_state_write_whose_answer_was_lost_lands_once(
    sdk_server: ServerInfo, proxy: LosingProxy, agent_name: str, name: str
) -> None:
    case = arrange(sdk_server, proxy, agent_name, name)
    with Client(proxy.url, key=sdk_server.admin_key) as client:
        answer = getattr(client.state.agent(agent_name), case.method)(*case.args)
    assert_landed_once(sdk_server, proxy, agent_name, case, answer)


@pytest.mark.parametrize("name", sorted(CASES))
async def test_async_a_state_write_whose_answer_was_lost_lands_once(
    sdk_server: ServerInfo, proxy: LosingProxy, agent_name: str, name: str
) -> None:
    case = arrange(sdk_server, proxy, agent_name, name)
    async with AsyncClient(proxy.url, key=sdk_server.admin_key) as client:
        answer = await getattr(client.state.agent(agent_name), case.method)(*case.args)
    assert_landed_once(sdk_server, proxy, agent_name, case, answer)


def assert_landed_once(server: ServerInfo, proxy: LosingProxy, agent: str, case: Case, answer: Any) -> None:
    assert_retried_with_one_key(proxy, *case.lost)
    returned = case.returns(answer)
    assert returned == case.expected, f"{case.method} answered {returned!r}"
    with straight(server, agent) as scope:
        found = case.check(scope)
    assert found == case.checked, f"after one {case.method}: {found!r}"


def test_a_retry_carries_the_first_attempts_key_each_call_its_own_and_a_read_none(
    sdk_server: ServerInfo, proxy: LosingProxy, agent_name: str
) -> None:
    """What the SDK sends, whatever the server does with it."""
    proxy.lose("POST", "/log/append")
    with Client(proxy.url, key=sdk_server.admin_key) as client:
        scope = client.state.agent(agent_name)
        scope.append("log", ["a"])
        scope.append("log", ["b"])
        scope.get("log")
    first, retry, other = proxy.requests("POST", "/log/append")
    assert first.key is not None and first.key == retry.key
    assert other.key is not None and other.key != first.key
    assert [seen.key for seen in proxy.requests("GET", "/state/log")] == [None]


def test_a_write_whose_answer_never_came_within_the_timeout_lands_once(
    sdk_server: ServerInfo, proxy: LosingProxy, agent_name: str
) -> None:
    """A read timeout, not a dropped connection: the proxy holds the answer until the SDK gives up."""
    proxy.lose("POST", "/log/append", mode="withhold")
    with Client(proxy.url, key=sdk_server.admin_key, timeout=1) as client:
        assert client.state.agent(agent_name).append("log", ["once"]).length == 1
    assert_retried_with_one_key(proxy, "POST", "/log/append")
    with straight(sdk_server, agent_name) as scope:
        assert scope.tail("log", 10) == ["once"]


def test_a_write_repeated_with_the_callers_own_key_by_another_client_lands_once(
    sdk_server: ServerInfo, agent_name: str
) -> None:
    """``idempotency_key=`` is the header itself: a process that restarted after a write it never saw
    answered repeats it with the same key and gets the first answer; another write under it is refused."""
    answers = []
    for _ in range(2):
        with straight(sdk_server, agent_name) as scope:
            answers.append(scope.append("log", ["a"], idempotency_key="order-42"))
    with straight(sdk_server, agent_name) as scope:
        with pytest.raises(IdempotencyMismatch):
            scope.append("log", ["b"], idempotency_key="order-42")
        assert (answers, scope.tail("log", 10)) == ([(1, 1), (1, 1)], ["a"])


# -- runs: start and cancel ------------------------------------------------------------------------

RUN_ROUTES = [("POST", "/v0/runs"), ("POST", "/cancel")]


@contextmanager
def run_to_start(server: ServerInfo, proxy: LosingProxy, keys: Keys) -> Iterator[tuple[Client, str]]:
    """A member's session to start a run in, with the answers of the start and the cancel to be lost;
    the member's client straight at the server and the session's id."""
    for route in RUN_ROUTES:
        proxy.lose(*route)
    with Client(server.url, key=keys.member) as direct:
        yield direct, direct.sessions.create().id


def assert_one_run_cancelled_once(proxy: LosingProxy, direct: Client, session_id: str, cancelled: Run) -> None:
    for route in RUN_ROUTES:
        assert_retried_with_one_key(proxy, *route)
    assert [run.id for run in direct.runs.list(session_id=session_id)] == [cancelled.id]
    assert cancelled.status == "cancelled"
    events = direct.runs.events(cancelled.id).events
    statuses = [event.data["status"] for event in events if event.type == "run.status"]
    assert statuses.count("cancelled") == 1, statuses


def test_a_run_started_and_cancelled_with_lost_answers_is_one_run_cancelled_once(
    sdk_server: ServerInfo, proxy: LosingProxy, keys: Keys, agent_name: str
) -> None:
    with run_to_start(sdk_server, proxy, keys) as (direct, session_id), Client(proxy.url, key=keys.member) as client:
        run = client.runs.start(agent_name, {"m": 1}, session_id=session_id)
        assert_one_run_cancelled_once(proxy, direct, session_id, client.runs.cancel(run.id))


async def test_async_a_run_started_and_cancelled_with_lost_answers_is_one_run_cancelled_once(
    sdk_server: ServerInfo, proxy: LosingProxy, keys: Keys, agent_name: str
) -> None:
    with run_to_start(sdk_server, proxy, keys) as (direct, session_id):
        async with AsyncClient(proxy.url, key=keys.member) as client:
            run = await client.runs.start(agent_name, {"m": 1}, session_id=session_id)
            assert_one_run_cancelled_once(proxy, direct, session_id, await client.runs.cancel(run.id))


# -- the worker's side: emit, batch, complete ------------------------------------------------------

WORKER_ROUTES = [("POST", "/events"), ("POST", "/v0/state/batch"), ("POST", "/complete")]
"""The worker's writes whose answers are lost, each the first of its route."""
OUTPUT = {"ok": True}


@contextmanager
def run_to_serve(
    server: ServerInfo, proxy: LosingProxy, keys: Keys, agent: str, caplog: pytest.LogCaptureFixture
) -> Iterator[tuple[Client, str]]:
    """A run of ``agent`` for the worker, the answers of its writes to be lost; the member's client
    straight at the server and the run's id."""
    for route in WORKER_ROUTES:
        proxy.lose(*route)
    with Client(server.url, key=keys.member) as direct, caplog.at_level(logging.WARNING, "keepstate.worker"):
        yield direct, direct.runs.start(agent).id


def test_a_workers_emit_batch_and_completion_with_lost_answers_land_once(
    sdk_server: ServerInfo, proxy: LosingProxy, keys: Keys, agent_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    answers: dict[str, Any] = {}
    worker = Worker(proxy.url, key=keys.worker, claim_wait=1)

    @worker.agent(agent_name)
    def agent(inv: Invocation) -> Any:
        answers["seq"] = inv.emit("hello")
        with inv.state.run.batch() as batch:
            batch.append("log", ["x"])
            batch.incr("n", 2)
        answers["batch"] = batch.results
        return OUTPUT

    with run_to_serve(sdk_server, proxy, keys, agent_name, caplog) as (direct, run_id):
        assert worker.poll_once(wait=HANG_S)
        worker.close()
        assert_worker_wrote_once(proxy, answers, caplog, direct, run_id)


async def test_async_a_workers_emit_batch_and_completion_with_lost_answers_land_once(
    sdk_server: ServerInfo, proxy: LosingProxy, keys: Keys, agent_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    answers: dict[str, Any] = {}
    worker = AsyncWorker(proxy.url, key=keys.worker, claim_wait=1)

    @worker.agent(agent_name)
    async def agent(inv: AsyncInvocation) -> Any:
        answers["seq"] = await inv.emit("hello")
        async with inv.state.run.batch() as batch:
            batch.append("log", ["x"])
            batch.incr("n", 2)
        answers["batch"] = batch.results
        return OUTPUT

    with run_to_serve(sdk_server, proxy, keys, agent_name, caplog) as (direct, run_id):
        assert await worker.poll_once(wait=HANG_S)
        await worker.aclose()
        assert_worker_wrote_once(proxy, answers, caplog, direct, run_id)


def assert_worker_wrote_once(
    proxy: LosingProxy, answers: dict[str, Any], caplog: pytest.LogCaptureFixture, direct: Client, run_id: str
) -> None:
    """Each write retried with its key and applied once; the completion reported without a refusal."""
    for route in WORKER_ROUTES:
        assert_retried_with_one_key(proxy, *route)
    assert not [r.message for r in caplog.records if "could not report" in r.message]
    run = direct.runs.wait(run_id, timeout=HANG_S)
    assert (run.status, run.output) == ("done", OUTPUT)
    events = direct.runs.events(run_id).events
    assert [(e.type, e.data) for e in events if not e.type.startswith("run.")] == [("message", "hello")]
    assert answers["seq"] == next(e.seq for e in events if e.type == "message")
    assert answers["batch"] == [(1, 1), 2]
    state = direct.state.run(run_id)
    assert (state.tail("log", 10), state.get("n")) == (["x"], 2)
