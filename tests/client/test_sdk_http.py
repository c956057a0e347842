"""The SDK's requests and answers, against ``httpx.MockTransport``: shapes, errors, retries, parity."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import keepstate
from keepstate.client import (
    AsyncClient,
    Client,
    calls,
)
from keepstate.client._core import Config
from keepstate.client._sync import SyncSender
from keepstate.client.invocation import http_state

Handler = Callable[[httpx.Request], httpx.Response]

RUN = {
    "id": "r1",
    "agent": "chat",
    "session_id": "s1",
    "user": None,
    "parent_id": None,
    "status": "queued",
    "input": {"m": 1},
    "output": None,
    "error": None,
    "hold": None,
    "decision": None,
    "created_at": 1,
    "updated_at": 1,
}


class Recorder:
    """A MockTransport handler that answers from a list and records every request."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0)

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def client_with(*answers: httpx.Response, key: str = "k-member") -> tuple[Client, Recorder]:
    recorder = Recorder(*answers)
    return Client("http://ks.test", key=key, transport=httpx.MockTransport(recorder)), recorder


def test_start_run_shape_auth_and_record() -> None:
    client, rec = client_with(httpx.Response(202, json=RUN))
    run = client.runs.start("chat", {"m": 1}, session_id="s1")
    assert run == keepstate.client.Run.from_dict(RUN)
    request = rec.requests[0]
    assert (request.method, request.url.path) == ("POST", "/v0/runs")
    assert request.headers["authorization"] == "Bearer k-member"
    assert request.headers["content-type"] == "application/json"
    assert rec.body() == {"agent": "chat", "input": {"m": 1}, "session_id": "s1"}


def test_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEPSTATE_URL", "http://from-env:9000/")
    monkeypatch.setenv("KEEPSTATE_KEY", "env-key")
    rec = Recorder(httpx.Response(200, json={"keys": []}))
    with Client(transport=httpx.MockTransport(rec)) as client:
        assert client.base_url == "http://from-env:9000"
        assert client.keys.list() == []
    assert rec.requests[0].url.host == "from-env"
    assert rec.requests[0].headers["authorization"] == "Bearer env-key"


@pytest.mark.parametrize(
    ("status", "body", "cls"),
    [
        (409, {"error": "session_busy", "message": "busy"}, keepstate.SessionBusy),
        (404, {"error": "not_found", "message": "no"}, keepstate.NotFound),
        (401, {"error": "unauthorized", "message": "no"}, keepstate.Unauthorized),
        (403, {"error": "forbidden", "message": "no"}, keepstate.Forbidden),
        (409, {"error": "not_held", "message": "no"}, keepstate.NotHeld),
        (400, {"error": "invalid_request", "message": "no"}, keepstate.InvalidRequest),
    ],
)
def test_errors_come_back_as_their_class(status: int, body: dict[str, Any], cls: type[Exception]) -> None:
    client, _ = client_with(httpx.Response(status, json=body))
    with pytest.raises(cls) as caught:
        client.runs.decide("r1", approved=True)
    assert isinstance(caught.value, keepstate.KeepstateError)
    assert caught.value.message == body["message"]


def test_version_conflict_detail_and_state_404() -> None:
    rec = Recorder(
        httpx.Response(404, json={"error": "not_found", "message": "absent"}),
        httpx.Response(409, json={"error": "version_conflict", "message": "x", "current_version": 7}),
    )
    sender = SyncSender(Config("http://ks.test", None), httpx.MockTransport(rec))
    state = http_state(sender.send, "tok-1")
    assert state.session.get_versioned("history") == (None, 0)
    with pytest.raises(keepstate.VersionConflict) as caught:
        state.agent.put("k", {"a": 1}, if_version=3)
    assert caught.value.current_version == 7
    first, second = rec.requests
    assert first.headers["x-agentos-run-token"] == "tok-1"
    assert "authorization" not in first.headers
    assert (second.method, second.url.path) == ("PUT", "/v0/state/agent/k")
    assert json.loads(second.content) == {"value": {"a": 1}, "if_version": 3}


def test_state_calls_paths_and_bodies() -> None:
    rec = Recorder(
        httpx.Response(200, json={"version": 2, "length": 3}),
        httpx.Response(204),
        httpx.Response(200, json={"keys": [{"key": "a", "version": 1}], "next": "a"}),
        httpx.Response(200, json={"keys": [{"key": "b", "version": 4}], "next": None}),
        httpx.Response(200, json={"value": [1], "version": 9}),
    )
    sender = SyncSender(Config("http://ks.test", None), httpx.MockTransport(rec))
    state = http_state(sender.send, "t")
    assert state.run.append("..", [1, "x"]) == (2, 3)
    state.user.delete("k", if_version=4)
    assert list(state.session.keys(prefix="p")) == [("a", 1), ("b", 4)]
    assert state.run.get("x") == [1]
    append, delete, page1, page2, _ = rec.requests
    assert append.url.raw_path == b"/v0/state/run/%2E%2E/append"
    assert json.loads(append.content) == {"items": [1, "x"]}
    assert (delete.method, delete.url.path, delete.url.params["if_version"]) == ("DELETE", "/v0/state/user/k", "4")
    assert dict(page1.url.params) == {"prefix": "p", "limit": "100"}
    assert page2.url.params["after"] == "a"


def test_bad_values_never_leave_the_process() -> None:
    rec = Recorder()
    sender = SyncSender(Config("http://ks.test", None), httpx.MockTransport(rec))
    state = http_state(sender.send, "t")
    with pytest.raises(keepstate.InvalidValue) as caught:
        state.run.put("k", {"a": [1, float("inf")]})
    assert caught.value.path == "$.a[1]"
    with pytest.raises(keepstate.InvalidKey):
        state.run.get("bad key")
    with pytest.raises(keepstate.TooLarge):
        state.run.append("k", ["x" * (1024 * 1024)])
    assert rec.requests == []


def test_get_retries_503_honouring_retry_after() -> None:
    client, rec = client_with(
        httpx.Response(503, json={"error": "unavailable", "message": "down"}, headers={"retry-after": "0"}),
        httpx.Response(502),
        httpx.Response(200, json=RUN),
    )
    assert client.runs.get("r1").id == "r1"
    assert len(rec.requests) == 3


def test_unsafe_write_is_not_retried_but_idempotent_one_is() -> None:
    unavailable = {"error": "unavailable", "message": "down", "retry_after": 0}
    client, rec = client_with(httpx.Response(503, json=unavailable, headers={"retry-after": "0"}))
    with pytest.raises(keepstate.Unavailable):
        client.sessions.create(user="u")
    assert len(rec.requests) == 1
    client, rec = client_with(
        httpx.Response(503, json=unavailable, headers={"retry-after": "0"}), httpx.Response(200, json=RUN)
    )
    assert client.runs.start("chat", {}, idempotency_key="once").id == "r1"
    assert [r.url.path for r in rec.requests] == ["/v0/runs", "/v0/runs"]
    assert rec.body(1)["idempotency_key"] == "once"


def test_retries_give_up_after_budget() -> None:
    answers = [httpx.Response(503, json={"error": "unavailable"}, headers={"retry-after": "0"}) for _ in range(3)]
    rec = Recorder(*answers)
    client = Client("http://ks.test", transport=httpx.MockTransport(rec), retries=2)
    with pytest.raises(keepstate.Unavailable):
        client.sessions.get("s")
    assert len(rec.requests) == 3


def test_connection_refused_is_unavailable_not_httpx() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = Client("http://ks.test", transport=httpx.MockTransport(refuse), retries=0)
    with pytest.raises(keepstate.Unavailable, match="cannot reach"):
        client.runs.get("r")


def test_read_timeout_retried_only_when_safe() -> None:
    calls_seen: list[str] = []

    def slow(request: httpx.Request) -> httpx.Response:
        calls_seen.append(request.method)
        raise httpx.ReadTimeout("slow", request=request)

    client = Client("http://ks.test", transport=httpx.MockTransport(slow), retries=1)
    with pytest.raises(keepstate.Unavailable):
        client.sessions.delete("s")
    assert calls_seen == ["DELETE"]
    with pytest.raises(keepstate.Unavailable):
        client.sessions.get("s")
    assert calls_seen == ["DELETE", "GET", "GET"]


def test_list_follows_pages_and_limit() -> None:
    def session(n: int) -> dict[str, Any]:
        return {"id": f"s{n}", "owner": "k", "user": None, "metadata": None, "created_at": n}

    client, rec = client_with(
        httpx.Response(200, json={"sessions": [session(1), session(2)], "next": "s2"}),
        httpx.Response(200, json={"sessions": [session(3)], "next": None}),
    )
    assert [s.id for s in client.sessions.list(user="u")] == ["s1", "s2", "s3"]
    assert rec.requests[0].url.params["user"] == "u"
    assert rec.requests[1].url.params["after"] == "s2"
    client, rec = client_with(httpx.Response(200, json={"sessions": [session(1), session(2)], "next": "s2"}))
    assert [s.id for s in client.sessions.list(limit=2)] == ["s1", "s2"]
    assert rec.requests[0].url.params["limit"] == "2"
    assert len(rec.requests) == 1


def test_wait_long_polls_until_finished() -> None:
    done = {**RUN, "status": "done", "output": {"ok": True}}
    client, rec = client_with(httpx.Response(200, json={**RUN, "status": "running"}), httpx.Response(200, json=done))
    run = client.runs.wait("r1", timeout=5)
    assert run.status == "done"
    assert run.output == {"ok": True}
    assert rec.requests[0].url.params["wait"] == "5"
    assert 0 < float(rec.requests[1].url.params["wait"]) <= 5


def test_wait_caps_each_poll_at_60_seconds() -> None:
    call = calls.get_run("r", wait=600)
    assert call.params == {"wait": "60"}
    assert call.timeout(Config("http://x", None, timeout=30)).read == 90


def test_keys_and_decision_shapes() -> None:
    key = {"id": "k1", "key": "secret", "role": "worker", "name": "w"}
    client, rec = client_with(
        httpx.Response(201, json=key),
        httpx.Response(204),
        httpx.Response(200, json={**RUN, "status": "queued"}),
        httpx.Response(200, json={**RUN, "status": "cancelled"}),
    )
    created = client.keys.create("worker", name="w")
    assert (created.key, created.role, created.created_at) == ("secret", "worker", None)
    client.keys.revoke("k1")
    client.runs.decide("r1", approved=False, data={"why": "no"})
    assert client.runs.cancel("r1").status == "cancelled"
    assert rec.body(0) == {"role": "worker", "name": "w"}
    assert (rec.requests[1].method, rec.requests[1].url.path) == ("DELETE", "/v0/keys/k1")
    assert rec.body(2) == {"approved": False, "data": {"why": "no"}}
    assert rec.requests[3].url.path == "/v0/runs/r1/cancel"


async def test_async_client_same_requests() -> None:
    rec = Recorder(
        httpx.Response(201, json={"id": "s1", "owner": "k", "user": "u", "metadata": {}, "created_at": 5}),
        httpx.Response(503, headers={"retry-after": "0"}),
        httpx.Response(200, json=RUN),
    )
    async with AsyncClient("http://ks.test", key="k", transport=httpx.MockTransport(rec)) as client:
        session = await client.sessions.create(user="u", metadata={})
        assert (session.id, session.user, session.created_at) == ("s1", "u", 5)
        assert (await client.runs.get("r1")).agent == "chat"
    assert rec.body(0) == {"user": "u", "metadata": {}}
    assert len(rec.requests) == 3


def test_client_has_the_spec_namespaces() -> None:
    client = Client("http://x")
    assert {"create", "get", "list", "delete"} <= set(dir(client.sessions))
    assert {"start", "get", "wait", "list", "decide", "cancel"} <= set(dir(client.runs))
    assert {"create", "list", "revoke"} <= set(dir(client.keys))
    client.close()
