"""Idempotency keys on the SDK's writes, against ``httpx.MockTransport``: which calls carry one, that a
retry repeats it, and which failures are retried. Whether the server applies a repeat once is for the
end-to-end tests (``test_sdk_idempotency.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

import keepstate
from keepstate import values
from keepstate.batch import Planned
from keepstate.client import AsyncClient, Client, calls, state_calls
from keepstate.client._core import Call, Config, retry_after_error, retry_after_status
from keepstate.client._sync import SyncSender
from keepstate.client.invocation import http_state
from keepstate.client.memory_calls import caller_target
from keepstate.client.memory_calls import write as memory_write
from keepstate.client.state_calls import StateTarget
from keepstate.ops import Op

RUN = {"id": "r1", "agent": "chat", "status": "queued", "created_at": 1, "updated_at": 1}
RUN_TARGET = StateTarget.of_run("session", "tok")
CALLER_TARGET = StateTarget.of_caller("sessions", "s1", "state", "chat")


def batch_call() -> Call[Any]:
    planned = [Planned(RUN_TARGET, Op("append", "log", [1])), Planned(RUN_TARGET, Op("incr", "n", 1))]
    return state_calls.batch("tok", planned, [RUN_TARGET, RUN_TARGET])


WRITES: dict[str, Callable[[], Call[Any]]] = {
    "put": lambda: state_calls.put(CALLER_TARGET, "k", 1, None, None),
    "put if_version": lambda: state_calls.put(RUN_TARGET, "k", 1, 0, None),
    "delete": lambda: state_calls.delete(RUN_TARGET, "k", None),
    "append": lambda: state_calls.append(CALLER_TARGET, "k", [1], None),
    "trim": lambda: state_calls.trim(RUN_TARGET, "k", 1, None, None),
    "pop": lambda: state_calls.pop(RUN_TARGET, "k", None),
    "incr": lambda: state_calls.incr(CALLER_TARGET, "k", 1, None, None),
    "patch": lambda: state_calls.patch(RUN_TARGET, "k", {"a": 1}, None, None),
    "batch": batch_call,
    "runs.start": lambda: calls.start_run("chat", {}, None, None),
    "child run": lambda: calls.start_run("chat", {}, None, None, token="tok"),
    "decision": lambda: calls.decide("r1", True, None),
    "cancel": lambda: calls.cancel_run("r1"),
    "complete": lambda: calls.complete("i1", "tok", {"ok": True}),
    "fail": lambda: calls.fail("i1", "tok", "E", "m"),
    "hold": lambda: calls.hold("i1", "tok", {"q": 1}),
    "emit": lambda: calls.emit("i1", "tok", [{"data": 1}]),
}
"""Every write the HTTP API's "Idempotent writes" names, one call of each kind."""

OTHERS: dict[str, Callable[[], Call[Any]]] = {
    "get": lambda: state_calls.get(RUN_TARGET, "k"),
    "keys": lambda: state_calls.keys(CALLER_TARGET, "", "", 100),
    "tail": lambda: state_calls.tail(RUN_TARGET, "k", 5),
    "runs.get": lambda: calls.get_run("r1"),
    "run events": lambda: calls.run_events("r1", 0, None),
    "claim": lambda: calls.claim(["chat"], 1),
    "heartbeat": lambda: calls.heartbeat("i1", "tok"),
    "session create": lambda: calls.create_session(None, None, None),
    "session delete": lambda: calls.delete_session("s1"),
    "key create": lambda: calls.create_key("member", None),
    "memory write": lambda: memory_write(caller_target("agents", "a", "memory"), "notes", "t", None, None),
}
"""Calls outside that list: reads, and writes the spec leaves as they were."""


@pytest.mark.parametrize("name", sorted(WRITES))
def test_every_write_carries_a_fresh_key_of_the_key_charset(name: str) -> None:
    first, second = WRITES[name](), WRITES[name]()
    assert first.idempotency_key is not None and second.idempotency_key is not None
    assert values.is_key(first.idempotency_key) and len(first.idempotency_key) == 22
    assert first.idempotency_key != second.idempotency_key
    assert first.repeatable
    headers = first.headers(Config("http://x", "k"))
    assert headers["idempotency-key"] == first.idempotency_key
    assert first.request(Config("http://x", "k"))["headers"] == headers


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_reads_and_the_other_calls_carry_none(name: str) -> None:
    call = OTHERS[name]()
    assert call.idempotency_key is None
    assert "idempotency-key" not in call.headers(Config("http://x", "k"))


def lose_with(error: type[httpx.TransportError]) -> Callable[[httpx.Request], httpx.Response]:
    def lose(request: httpx.Request) -> httpx.Response:
        raise error("the answer was lost", request=request)

    return lose


def status(code: int, error: str = "unavailable") -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(code, json={"error": error, "message": "x"}, headers={"retry-after": "0"})


FAILURES = {
    "read timeout": lose_with(httpx.ReadTimeout),
    "dropped after sending": lose_with(httpx.RemoteProtocolError),
    "read error": lose_with(httpx.ReadError),
    "write error": lose_with(httpx.WriteError),
    "502": status(502, "bad_gateway"),
    "503": status(503),
    "504": status(504, "gateway_timeout"),
    "409 in flight": status(409, "idempotency_in_flight"),
}
"""Every way an answer is lost (or not yet there) that a write with a key is retried after."""


class Script:
    """A MockTransport handler: the steps in order (the last one again when they run out), every request kept."""

    def __init__(self, *steps: Callable[[httpx.Request], httpx.Response]) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        return step(request)

    def keys(self) -> list[str | None]:
        return [request.headers.get("idempotency-key") for request in self.requests]


def ok(answer: Any) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(200, json=answer)


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_write_whose_answer_was_lost_is_sent_again_with_the_same_key(failure: str) -> None:
    script = Script(FAILURES[failure], ok({"item": "last", "version": 3, "length": 1}))
    state = http_state(SyncSender(Config("http://ks.test", None), httpx.MockTransport(script)).send, "tok")
    assert state.session.pop("queue") == "last"
    first, again = script.keys()
    assert first is not None and first == again
    assert [r.url.path for r in script.requests] == ["/v0/state/session/queue/pop"] * 2
    assert script.requests[0].content == script.requests[1].content


def test_each_call_has_its_own_key_and_a_read_none() -> None:
    script = Script(ok({"version": 1, "length": 1}), ok({"version": 2, "length": 2}), ok({"value": 1, "version": 2}))
    with Client("http://ks.test", key="k", transport=httpx.MockTransport(script)) as client:
        scope = client.state.agent("chat")
        scope.append("log", [1])
        scope.append("log", [1])
        scope.get("log")
    first, second, read = script.keys()
    assert first and second and first != second
    assert read is None


def test_the_retry_budget_bounds_the_repeats_then_the_loss_is_raised() -> None:
    script = Script(lose_with(httpx.RemoteProtocolError))
    client = Client("http://ks.test", key="k", transport=httpx.MockTransport(script), retries=2)
    with client, pytest.raises(keepstate.Unavailable, match="cannot reach"):
        client.runs.cancel("r1")
    assert len(script.requests) == 3
    assert len(set(script.keys())) == 1


@pytest.mark.parametrize(
    ("code", "error"),
    [(409, "version_conflict"), (409, "session_busy"), (422, "idempotency_mismatch"), (401, "unauthorized")],
)
def test_a_refusal_is_the_answer_not_a_loss(code: int, error: str) -> None:
    script = Script(status(code, error), ok(RUN))
    client = Client("http://ks.test", key="k", transport=httpx.MockTransport(script))
    with client, pytest.raises(keepstate.KeepstateError) as caught:
        client.runs.decide("r1", approved=True)
    assert (caught.value.status, caught.value.code) == (code, error)
    assert len(script.requests) == 1


def test_in_flight_is_waited_out_only_with_a_key() -> None:
    in_flight = httpx.Response(409, json={"error": "idempotency_in_flight", "message": "x"})
    config = Config("http://x", None)
    with_key, without = calls.cancel_run("r1"), calls.heartbeat("i1", "tok")
    assert retry_after_status(with_key, 0, in_flight, config) is not None
    assert retry_after_status(without, 0, in_flight, config) is None
    assert retry_after_status(with_key, config.retries, in_flight, config) is None


def test_a_lost_answer_of_a_write_outside_the_list_is_still_not_repeated() -> None:
    config = Config("http://x", None)
    lost = httpx.RemoteProtocolError("dropped")
    assert retry_after_error(calls.delete_session("s1"), 0, lost, config) is None
    assert retry_after_error(calls.delete_session("s1"), 0, httpx.ConnectError("refused"), config) is not None
    assert retry_after_error(calls.cancel_run("r1"), 0, lost, config) is not None


async def test_the_async_face_repeats_the_same_key() -> None:
    script = Script(lose_with(httpx.ReadTimeout), status(503), ok({"value": 2, "version": 2}))
    async with AsyncClient("http://ks.test", key="k", transport=httpx.MockTransport(script)) as client:
        assert await client.state.agent("chat").incr("n") == 2
    keys = script.keys()
    assert len(keys) == 3 and keys[0] is not None and len(set(keys)) == 1


def test_a_callers_own_idempotency_key_is_the_header_on_every_attempt() -> None:
    script = Script(lose_with(httpx.RemoteProtocolError), ok({"version": 1, "length": 1}), ok({"version": 2}))
    with Client("http://ks.test", key="k", transport=httpx.MockTransport(script)) as client:
        scope = client.state.agent("chat")
        scope.append("log", [1], idempotency_key="order-42")
        scope.put("k", 1)
    mine, again, fresh = script.keys()
    assert mine == again == "order-42"
    assert fresh is not None and fresh != "order-42"
