"""The State API's short cuts answer exactly as the long way would.

Two short cuts serve a state GET (see ``KeepstateApp`` and ``StateApi.get_as``): state requests skip
Starlette's router (matched on the raw path, segment by segment), and a known run token's validity is
read in the same statement as the value. These tests pin the path table, and that the one-statement
read answers values, lists, absent and deleted keys, and dead tokens as ``authenticate_run`` followed
by ``get`` does, on every platform store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from server_helpers import bearer, token

from backends import declaring, fresh_url
from keepstate.platform.state import StateApi
from keepstate.server.app import create_app
from keepstate.server.state_routes import match_state

ROOT = "root"
SEGMENTS = [
    "",
    "a",
    "k.1",
    "append",
    "pop",
    "batch",
    "state",
    "v0",
    "a%20b",
    "a%2Fb",
    "a%2fappend",
    "%C3%A9",
    "%FF",
    "x" * 201,
]
METHODS = ["GET", "PUT", "DELETE", "POST", "PATCH", "HEAD"]


def _expected(method: str, segments: list[str]) -> tuple[str, str, str, str | None] | None:
    """What the State API's path table says, written out plainly: template, scope, key, handler name."""
    decoded = [unquote(part, errors="replace") for part in segments]
    verb = "GET" if method == "HEAD" else method
    if decoded == ["batch"]:  # exactly /v0/state/batch; with a slash it lists a scope called batch
        return "/v0/state/batch", "batch", "", {"POST": "state_batch"}.get(verb)
    if len(decoded) == 2 and decoded[1] == "":
        decoded = decoded[:1]
    if not decoded or not decoded[0]:
        return None
    if len(decoded) == 1:
        return "/v0/state/{scope}", decoded[0], "", {"GET": "state_keys"}.get(verb)
    if len(decoded) == 2:
        handlers = {"GET": "state_get", "PUT": "state_put", "PATCH": "state_patch", "DELETE": "state_delete"}
        return "/v0/state/{scope}/{key}", decoded[0], decoded[1], handlers.get(verb)
    if len(decoded) == 3 and decoded[2] in ("append", "trim", "pop", "incr"):
        action = decoded[2]
        return f"/v0/state/{{scope}}/{{key}}/{action}", decoded[0], decoded[1], {"POST": f"state_{action}"}.get(verb)
    return None


@settings(max_examples=400, deadline=None)
@given(method=st.sampled_from(METHODS), segments=st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4))
def test_state_paths_are_matched_segment_by_segment_on_the_raw_path(method: str, segments: list[str]) -> None:
    raw = ("/v0/state/" + "/".join(segments)).encode()
    found = match_state(method, raw + b"?prefix=a%2Fb")
    expected = _expected(method, segments)
    if expected is None:
        assert found is None, raw
        return
    assert found is not None, raw
    handler = None if found.handler is None else found.handler.__name__
    assert (found.template, found.address.scope, found.key, handler) == expected, raw


def test_an_encoded_slash_never_makes_an_action() -> None:
    found = match_state("POST", b"/v0/state/session/victim%2Fappend")
    assert found is not None and found.handler is None and found.key == "victim/append"
    assert "POST" not in found.shape.allow and found.shape.allow.startswith("GET, HEAD")


def test_callers_prefixes_match_the_same_shapes() -> None:
    found = match_state("POST", b"/v0/sessions/s%201/state/chat/h/append")
    assert found is not None and found.template == "/v0/sessions/{id}/state/{agent}/{key}/append"
    assert (found.address.kind, found.address.id, found.address.agent, found.key) == ("session", "s 1", "chat", "h")
    listing = match_state("GET", b"/v0/runs/r1/state/")
    assert listing is not None and listing.template == "/v0/runs/{id}/state" and listing.address.id == "r1"
    assert match_state("GET", b"/v0/users/u/state") is None  # the user prefix names an agent too


@pytest.fixture(params=declaring("platform"))
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    with fresh_url(request.param, tmp_path) as url:
        app = create_app(url, bootstrap_admin=True, admin_key=ROOT)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as found,
        ):
            yield found


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


@pytest.mark.parametrize("backend_url", declaring("platform", "shared"), indirect=True)
async def test_a_token_ended_elsewhere_is_refused_before_its_request_is_judged(backend_url: str) -> None:
    """Ended through a second app on the same store, the token stays known to the first: its
    next GET takes the one-statement read, which must still answer 401 before anything else."""
    url = backend_url
    first, second = (create_app(url, bootstrap_admin=True, admin_key=ROOT) for _ in range(2))
    async with (
        first.router.lifespan_context(first),
        second.router.lifespan_context(second),
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
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "PUT",
            "path": "/v0/state/run/k",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"x-agentos-run-token", inv["token"].encode()), (b"content-length", b"20")],
        }
        await app(scope, receive, send)
        assert sent == []
        assert app.state.metrics.requests.series[("/v0/state/{scope}/{key}", "PUT", 499)].count == 1
