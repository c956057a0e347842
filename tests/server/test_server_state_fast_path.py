"""The State API's short cuts answer exactly as the long way would.

Two short cuts serve a state GET (see ``KeepstateApp`` and ``StateApi.get_as``): requests shaped like
a state route skip Starlette's router, and a known run token's validity is read in the same
statement as the value. These tests pin that the router would have picked the same route with
the same parameters, and that the one-statement read answers values, lists, absent and deleted
keys, and dead tokens as ``authenticate_run`` followed by ``get`` does, on every platform store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from server_helpers import bearer, token
from starlette.routing import Match, Route

from keepstate.platform.state import StateApi
from keepstate.server.app import create_app
from keepstate.server.state_routes import match_state_route

ROOT = "root"
SEGMENTS = ["", "a", "k.1", "append", "state", "v0", "a b", "%2F", "é", "x" * 201]
METHODS = ["GET", "PUT", "DELETE", "POST", "PATCH", "HEAD"]
APP_ROUTES = [route for route in create_app("memory://").routes if isinstance(route, Route)]


def _router_choice(method: str, path: str) -> tuple[Route, dict[str, Any]] | None:
    """The route Starlette's router answers with (its first full match), and its path parameters."""
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    for route in APP_ROUTES:
        found, child = route.matches(scope)
        if found is Match.FULL:
            return route, child["path_params"]
    return None


@settings(max_examples=400, deadline=None)
@given(
    method=st.sampled_from(METHODS),
    prefix=st.sampled_from(["/v0/state/", "/v0/state", "/v0/states/", "/v1/state/", "/v0/state//"]),
    segments=st.lists(st.sampled_from(SEGMENTS), max_size=4),
    slash=st.booleans(),
)
def test_a_short_cut_route_is_the_one_the_router_would_pick(
    method: str, prefix: str, segments: list[str], slash: bool
) -> None:
    path = prefix + "/".join(segments) + ("/" if slash else "")
    ours = match_state_route(method, path)
    theirs = _router_choice(method, path)
    if method == "HEAD":
        assert ours is None  # a HEAD answer has no body: uvicorn and Starlette's routes know how
    if ours is not None:
        assert theirs is not None and theirs[0] is ours[0] and theirs[1] == ours[1], path
    elif theirs is not None and method != "HEAD":  # HEAD is left to the router on purpose
        assert not theirs[0].path.startswith("/v0/state/"), f"{method} {path} should take the short cut"


def test_the_short_cut_covers_every_state_route() -> None:
    assert match_state_route("GET", "/v0/state/user/k")[0].path == "/v0/state/{scope}/{key}"  # type: ignore[index]
    assert match_state_route("POST", "/v0/state/user/k/append")[1] == {"scope": "user", "key": "k"}  # type: ignore[index]
    assert match_state_route("GET", "/v0/state/user")[1] == {"scope": "user"}  # type: ignore[index]
    assert match_state_route("PATCH", "/v0/state/user/k") is None
    assert match_state_route("GET", "/v0/state/user/k/") is None


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(_store_url(request), bootstrap_admin=True, admin_key=ROOT)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as found,
    ):
        yield found


def _store_url(request: pytest.FixtureRequest) -> str:
    name = request.param
    if name == "memory":
        return "memory://"
    return str(request.getfixturevalue({"sqlite": "sqlite_url", "postgres": "pg_url"}[name]))


async def _claim(client: httpx.AsyncClient, session: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"agent": "fast"}
    if session:
        body["session_id"] = (await client.post("/v0/sessions", json={}, headers=bearer(ROOT))).json()["id"]
    started = await client.post("/v0/runs", json=body, headers=bearer(ROOT))
    assert started.status_code == 202, started.text
    claimed = await client.post("/v0/invocations/claim", json={"agents": ["fast"]}, headers=bearer(ROOT))
    assert claimed.status_code == 200, claimed.text
    found: dict[str, Any] = claimed.json()
    return found


async def test_the_one_statement_read_answers_like_the_plain_read(client: httpx.AsyncClient) -> None:
    inv = await _claim(client)
    headers = token(inv["token"])
    first = await client.get("/v0/state/run/v", headers=headers)  # first use: the full check, then the read
    assert first.status_code == 404 and first.json()["error"] == "not_found"
    assert (await client.put("/v0/state/run/v", json={"value": {"é": [1, 2.5]}}, headers=headers)).status_code == 200
    got = await client.get("/v0/state/run/v", headers=headers)  # now a known token: one statement
    assert got.json() == {"value": {"é": [1, 2.5]}, "version": 1}
    for items in ([1, "two"], [{"three": 3}]):
        assert (await client.post("/v0/state/run/l/append", json={"items": items}, headers=headers)).status_code == 200
    listed = await client.get("/v0/state/run/l", headers=headers)
    assert listed.json() == {"value": [1, "two", {"three": 3}], "version": 2}
    assert (await client.delete("/v0/state/run/v", headers=headers)).status_code == 204
    gone = await client.get("/v0/state/run/v", headers=headers)
    assert gone.status_code == 404 and gone.json()["error"] == "not_found"
    missing = await client.get("/v0/state/agent/never", headers=headers)
    assert missing.status_code == 404


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
async def test_a_token_ended_elsewhere_is_refused_before_its_request_is_judged(
    store: str, request: pytest.FixtureRequest
) -> None:
    """Ended through a second app on the same store, the token stays known to the first: its
    next GET takes the one-statement read, which must still answer 401 before anything else."""
    url = str(request.getfixturevalue(f"{store.replace('postgres', 'pg')}_url"))
    first, second = (create_app(url, bootstrap_admin=True, admin_key=ROOT) for _ in range(2))
    async with (
        first.router.lifespan_context(first), second.router.lifespan_context(second),
        httpx.AsyncClient(transport=httpx.ASGITransport(first), base_url="http://test") as client,
        httpx.AsyncClient(transport=httpx.ASGITransport(second), base_url="http://test") as other,
    ):
        inv = await _claim(client)
        headers = token(inv["token"])
        assert (await client.put("/v0/state/run/k", json={"value": 1}, headers=headers)).status_code == 200
        assert (await client.get("/v0/state/run/k", headers=headers)).status_code == 200  # known now
        no_session = await client.get("/v0/state/session/k", headers=headers)
        assert no_session.status_code == 409 and no_session.json()["error"] == "no_session"  # live: the real error
        bad_key = await client.get("/v0/state/run/a b", headers=headers)
        assert bad_key.status_code == 400 and bad_key.json()["error"] == "invalid_key"
        done = await other.post(f"/v0/invocations/{inv['id']}/complete", json={}, headers=headers)
        assert done.status_code == 200, done.text
        for path in ("/v0/state/session/k", "/v0/state/run/a b", "/v0/state/nowhere/k", "/v0/state/run/k"):
            answer = await client.get(path, headers=headers)
            assert answer.status_code == 401 and answer.json()["error"] == "unauthorized", (path, answer.text)


async def test_a_bug_on_the_short_cut_is_a_logged_500_in_the_api_shape(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app("memory://", bootstrap_admin=True, admin_key=ROOT)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client,
    ):
        inv = await _claim(client)

        async def broken(*args: object) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(StateApi, "get_as", broken)
        answer = await client.get("/v0/state/run/k", headers=token(inv["token"]))
        assert answer.status_code == 500 and answer.json() == {"error": "internal", "message": "internal server error"}
        assert "internal error on GET /v0/state/run/k" in caplog.text
        metrics = (await client.get("/metrics")).text
        assert 'keepstate_http_requests_total{method="GET",route="/v0/state/{scope}/{key}",status="500"} 1.0' in metrics


async def test_a_client_gone_mid_body_gets_no_answer_and_is_counted() -> None:
    app = create_app("memory://", bootstrap_admin=True, admin_key=ROOT)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            inv = await _claim(client)
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http", "method": "PUT", "path": "/v0/state/run/k", "root_path": "", "query_string": b"",
            "headers": [(b"x-agentos-run-token", inv["token"].encode()), (b"content-length", b"20")],
        }
        await app(scope, receive, send)
        assert sent == []
        assert app.state.metrics.requests.series[("/v0/state/{scope}/{key}", "PUT", 499)].count == 1
