"""The State API's newer calls over HTTP (lists in part, trim, pop, incr, PATCH, expiry, batches) and the
callers' view of state, on every store with a platform, through the app in process.

The storage rules are the conformance suites'; these pin the wire: paths, bodies, answers, errors,
and who may address which state (404 for what a caller may not see, 403 for a member on agent and
user state, 401 before any body is read).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from server_helpers import bearer, token

from backends import declaring
from keepstate import AsyncClient, Items, NotFound
from keepstate.server.app import create_app

ROOT = "ks_" + "r" * 40
pytestmark = pytest.mark.parametrize("app_url", declaring("platform"), indirect=True)


@pytest.fixture
def app_url(request: pytest.FixtureRequest) -> str:
    name = request.param
    if name == "memory":
        return "memory://"
    return str(request.getfixturevalue({"sqlite": "sqlite_url", "postgres": "pg_url"}[name]))


@pytest.fixture
async def http(app_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(app_url, bootstrap_admin=True, admin_key=ROOT)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client,
    ):
        yield client


async def _key(http: httpx.AsyncClient, role: str) -> dict[str, str]:
    answer = await http.post("/v0/keys", json={"role": role}, headers=bearer(ROOT))
    return bearer(answer.json()["key"])


async def _run(
    http: httpx.AsyncClient, member: dict[str, str], agent: str = "v2", user: str | None = "u-1"
) -> tuple[str, str, dict[str, str]]:
    """A session of ``member``, a run of ``agent`` in it, claimed: (session id, run id, token headers)."""
    session = (await http.post("/v0/sessions", json={"user": user}, headers=member)).json()["id"]
    run = (await http.post("/v0/runs", json={"agent": agent, "session_id": session}, headers=member)).json()
    claimed = await http.post("/v0/invocations/claim", json={"agents": [agent]}, headers=bearer(ROOT))
    assert claimed.status_code == 200, claimed.text
    return session, run["id"], token(claimed.json()["token"])


def _error(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body: dict[str, Any] = answer.json()
    assert body["error"] == code
    return body


async def test_lists_in_part_trim_and_pop_over_http(http: httpx.AsyncClient) -> None:
    _, _, run = await _run(http, bearer(ROOT))
    for start in range(0, 50, 10):
        await http.post("/v0/state/session/h/append", json={"items": list(range(start, start + 10))}, headers=run)
    assert (await http.get("/v0/state/session/h?tail=3", headers=run)).json() == {
        "items": [47, 48, 49],
        "version": 5,
        "length": 50,
    }
    assert (await http.get("/v0/state/session/h?start=10&limit=2", headers=run)).json() == {
        "items": [10, 11],
        "version": 5,
        "length": 50,
    }
    assert (await http.post("/v0/state/session/h/trim", json={"keep_last": 5}, headers=run)).json() == {
        "version": 6,
        "length": 5,
    }
    assert (await http.post("/v0/state/session/h/pop", headers=run)).json() == {"item": 49, "version": 7, "length": 4}
    _error(await http.get("/v0/state/session/absent?tail=2", headers=run), 404, "not_found")
    _error(await http.post("/v0/state/session/absent/pop", json={}, headers=run), 404, "not_found")
    await http.put("/v0/state/session/v", json={"value": {"a": 1}}, headers=run)
    _error(await http.get("/v0/state/session/v?tail=1", headers=run), 409, "not_a_list")
    for bad in ("tail=0", "tail=1001", "tail=x", "start=-1", "limit=0", "limit=1001"):
        _error(await http.get(f"/v0/state/session/h?{bad}", headers=run), 400, "invalid_request")


async def test_incr_patch_and_expiry_over_http(http: httpx.AsyncClient) -> None:
    _, _, run = await _run(http, bearer(ROOT))
    assert (await http.post("/v0/state/agent/n/incr", headers=run)).json() == {"value": 1, "version": 1}
    assert (await http.post("/v0/state/agent/n/incr", json={"by": -5}, headers=run)).json() == {
        "value": -4,
        "version": 2,
    }
    await http.put("/v0/state/agent/s", json={"value": "text"}, headers=run)
    _error(await http.post("/v0/state/agent/s/incr", json={}, headers=run), 409, "not_an_integer")
    await http.put("/v0/state/agent/max", json={"value": 2**63 - 1}, headers=run)
    _error(await http.post("/v0/state/agent/max/incr", json={}, headers=run), 400, "invalid_value")
    _error(await http.post("/v0/state/agent/n/incr", json={"by": 1.5}, headers=run), 400, "invalid_request")
    patched = await http.patch("/v0/state/agent/doc", json={"patch": {"a": {"b": 1}, "c": None}}, headers=run)
    assert patched.json() == {"value": {"a": {"b": 1}}, "version": 1}
    _error(
        await http.patch("/v0/state/agent/doc", json={"patch": {}, "if_version": 9}, headers=run),
        409,
        "version_conflict",
    )
    put = await http.put("/v0/state/agent/t", json={"value": 1, "ttl_seconds": 60}, headers=run)
    assert put.status_code == 200
    got = (await http.get("/v0/state/agent/t", headers=run)).json()
    assert set(got) == {"value", "version", "expires_at"} and got["expires_at"] > 0
    assert "expires_at" not in (await http.get("/v0/state/agent/n", headers=run)).json()
    _error(
        await http.put("/v0/state/agent/t", json={"value": 1, "ttl_seconds": 0}, headers=run), 400, "invalid_request"
    )


async def test_a_batch_over_http_answers_each_op_or_writes_nothing(http: httpx.AsyncClient) -> None:
    _, _, run = await _run(http, bearer(ROOT))
    await http.put("/v0/state/run/progress", json={"value": 1}, headers=run)
    done = await http.post(
        "/v0/state/batch",
        json={
            "ops": [
                {"op": "put", "scope": "run", "key": "progress", "value": 2, "if_version": 1},
                {"op": "append", "scope": "session", "key": "outbox", "items": [{"to": "x"}]},
                {"op": "incr", "scope": "agent", "key": "sent", "by": 2},
                {"op": "patch", "scope": "user", "key": "prefs", "patch": {"lang": "ar"}},
                {"op": "trim", "scope": "session", "key": "outbox", "keep_last": 5},
                {"op": "delete", "scope": "run", "key": "absent"},
            ]
        },
        headers=run,
    )
    assert done.json() == {
        "results": [
            {"version": 2},
            {"version": 1, "length": 1},
            {"value": 2, "version": 1},
            {"value": {"lang": "ar"}, "version": 1},
            {"version": 2, "length": 1},
            {},
        ]
    }
    conflict = _error(
        await http.post(
            "/v0/state/batch",
            json={
                "ops": [
                    {"op": "put", "scope": "run", "key": "progress", "value": 3, "if_version": 1},
                    {"op": "put", "scope": "agent", "key": "fresh", "value": 3},
                    {"op": "incr", "scope": "agent", "key": "sent", "if_version": 7},
                ]
            },
            headers=run,
        ),
        409,
        "version_conflict",
    )
    assert conflict["conflicts"] == [
        {"index": 0, "scope": "run", "key": "progress", "current_version": 2},
        {"index": 2, "scope": "agent", "key": "sent", "current_version": 1},
    ]
    assert (await http.get("/v0/state/agent/fresh", headers=run)).status_code == 404
    failed = _error(
        await http.post(
            "/v0/state/batch",
            json={
                "ops": [
                    {"op": "put", "scope": "agent", "key": "fresh", "value": 3},
                    {"op": "append", "scope": "run", "key": "progress", "items": [1]},
                ]
            },
            headers=run,
        ),
        409,
        "not_a_list",
    )
    assert failed["index"] == 1
    assert (await http.get("/v0/state/agent/fresh", headers=run)).status_code == 404
    bad = _error(
        await http.post(
            "/v0/state/batch", json={"ops": [{"op": "put", "scope": "galaxy", "key": "k", "value": 1}]}, headers=run
        ),
        400,
        "invalid_request",
    )
    assert bad["index"] == 0
    _error(await http.post("/v0/state/batch", json={"ops": []}, headers=run), 400, "invalid_request")
    _error(
        await http.post(
            "/v0/state/batch",
            json={"ops": [{"op": "put", "scope": "run", "key": f"k{n}", "value": n} for n in range(101)]},
            headers=run,
        ),
        400,
        "invalid_request",
    )


async def test_callers_read_and_write_the_state_their_agents_see(http: httpx.AsyncClient) -> None:
    member = await _key(http, "member")
    session, run_id, run = await _run(http, member, agent="chat", user="cust-9")
    await http.post(
        "/v0/state/session/history/append", json={"items": [{"role": "user", "content": "hi"}]}, headers=run
    )
    await http.put("/v0/state/run/progress", json={"value": {"step": 1}}, headers=run)
    await http.put("/v0/state/agent/visits", json={"value": 3}, headers=run)
    await http.put("/v0/state/user/prefs", json={"value": {"lang": "ar"}}, headers=run)
    prefix = f"/v0/sessions/{session}/state/chat"
    assert (await http.get(f"{prefix}/history?tail=5", headers=member)).json()["items"] == [
        {"role": "user", "content": "hi"}
    ]
    grown = await http.post(
        f"{prefix}/history/append", json={"items": [{"role": "assistant", "content": "yo"}]}, headers=member
    )
    assert grown.json() == {"version": 2, "length": 2}
    assert (await http.get("/v0/state/session/history", headers=run)).json()["version"] == 2  # the agent sees it
    assert (await http.get(f"{prefix}/", headers=member)).json() == {
        "keys": [{"key": "history", "version": 2}],
        "next": None,
    }
    assert (await http.get(f"/v0/runs/{run_id}/state/progress", headers=member)).json()["value"] == {"step": 1}
    assert (await http.get("/v0/agents/chat/state/visits", headers=bearer(ROOT))).json()["value"] == 3
    assert (await http.get("/v0/users/cust-9/state/chat/prefs", headers=bearer(ROOT))).json()["value"] == {"lang": "ar"}
    assert (await http.post("/v0/agents/chat/state/visits/incr", headers=bearer(ROOT))).json()["value"] == 4


async def test_callers_see_only_what_the_api_lets_them_see(http: httpx.AsyncClient) -> None:
    owner, other, worker = await _key(http, "member"), await _key(http, "member"), await _key(http, "worker")
    session, run_id, _ = await _run(http, owner, agent="chat")
    paths = [f"/v0/sessions/{session}/state/chat/k", f"/v0/runs/{run_id}/state/k"]
    for path in paths:
        _error(await http.get(path, headers=other), 404, "not_found")  # never reveal that it exists
        _error(await http.put(path, json={"value": 1}, headers=other), 404, "not_found")
        _error(await http.get(path, headers=worker), 403, "forbidden")
        _error(await http.put(path, content=b'{"value": NaN}'), 401, "unauthorized")  # before the body
    for path in ("/v0/agents/chat/state/k", "/v0/users/u-1/state/chat/k"):
        _error(await http.get(path, headers=owner), 403, "forbidden")
        _error(await http.put(path, content=b"x" * 100, headers=bearer("ks_forged")), 401, "unauthorized")
    _error(await http.get("/v0/sessions/nope/state/chat/k", headers=owner), 404, "not_found")
    _error(
        await http.post(f"/v0/sessions/{session}/state/chat/a%2Fappend", json={"items": [1]}, headers=owner),
        405,
        "invalid_request",
    )
    _error(
        await http.put(f"/v0/sessions/{session}/state/chat/a%2Fb", json={"value": 1}, headers=owner), 400, "invalid_key"
    )
    _error(await http.get(f"/v0/sessions/{session}/state/bad agent/k", headers=owner), 400, "invalid_key")


async def test_a_callers_state_of_an_agent_that_never_ran_goes_with_the_session(http: httpx.AsyncClient) -> None:
    """A member writes the state of agent ``notes``, which has no run in the session; the session's delete
    drops it, so whoever makes the id again starts empty."""
    owner, other = await _key(http, "member"), await _key(http, "member")
    session = (await http.post("/v0/sessions", json={}, headers=owner)).json()["id"]
    prefix = f"/v0/sessions/{session}/state/notes"
    assert (await http.put(f"{prefix}/secret", json={"value": "A's"}, headers=owner)).status_code == 200
    assert (await http.post(f"{prefix}/count/incr", headers=owner)).json()["value"] == 1
    assert (await http.delete(f"/v0/sessions/{session}", headers=owner)).status_code == 204
    _error(await http.put(f"{prefix}/late", json={"value": 1}, headers=owner), 404, "not_found")
    again = await http.post("/v0/sessions", json={"id": session}, headers=other)
    assert again.status_code == 201, again.text
    _error(await http.get(f"{prefix}/secret", headers=other), 404, "not_found")
    assert (await http.get(f"{prefix}/", headers=other)).json() == {"keys": [], "next": None}
    assert (await http.post(f"{prefix}/count/incr", headers=other)).json()["value"] == 1  # recorded anew
    assert (await http.delete(f"/v0/sessions/{session}", headers=other)).status_code == 204
    again = await http.post("/v0/sessions", json={"id": session}, headers=owner)
    assert (await http.get(f"{prefix}/", headers=owner)).json()["keys"] == []


async def test_the_sdk_reads_and_writes_caller_state(http: httpx.AsyncClient, app_url: str) -> None:
    member = await _key(http, "member")
    session, _, run = await _run(http, member, agent="chat")
    await http.post("/v0/state/session/history/append", json={"items": ["a", "b", "c"]}, headers=run)
    transport = http._transport  # the same app in process
    async with AsyncClient("http://test", key=member["Authorization"][7:], transport=transport) as client:
        history = client.state.session(session, "chat")
        assert await history.tail("history", 2) == ["b", "c"]
        assert await history.items("history", start=1, limit=1) == Items(["b"], 1, 3)
        assert await history.append("history", ["d"]) == (2, 4)
        assert await history.pop("history") == "d"
        assert await history.incr("turns", by=2) == 2
        assert await history.patch("meta", {"topic": "x"}) == {"topic": "x"}
        await history.put("tmp", 1, ttl_seconds=60)
        assert (await history.expires_at("tmp") or 0) > 0
        assert [key async for key, _ in history.keys()] == ["history", "meta", "tmp", "turns"]
        with pytest.raises(NotFound):
            await client.state.session("nope", "chat").get_versioned("x")
