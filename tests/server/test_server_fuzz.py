"""Malformed requests never make a 500: wrong types, huge numbers, missing fields, bad routes and params."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import Api, token

ROUTES = [
    ("POST", "/v0/keys"),
    ("GET", "/v0/keys"),
    ("DELETE", "/v0/keys/{id}"),
    ("POST", "/v0/sessions"),
    ("GET", "/v0/sessions"),
    ("GET", "/v0/sessions/{id}"),
    ("DELETE", "/v0/sessions/{id}"),
    ("POST", "/v0/runs"),
    ("GET", "/v0/runs"),
    ("GET", "/v0/runs/{id}"),
    ("POST", "/v0/runs/{id}/decision"),
    ("POST", "/v0/runs/{id}/cancel"),
    ("POST", "/v0/invocations/claim"),
    ("POST", "/v0/invocations/{id}/heartbeat"),
    ("POST", "/v0/invocations/{id}/complete"),
    ("POST", "/v0/invocations/{id}/fail"),
    ("POST", "/v0/invocations/{id}/hold"),
    ("GET", "/v0/state/{scope}/{id}"),
    ("PUT", "/v0/state/{scope}/{id}"),
    ("DELETE", "/v0/state/{scope}/{id}"),
    ("POST", "/v0/state/{scope}/{id}/append"),
    ("GET", "/v0/state/{scope}"),
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "value",
                    "items",
                    "agent",
                    "role",
                    "agents",
                    "wait",
                    "if_version",
                    "approved",
                    "error",
                    "session_id",
                    "id",
                    "user",
                    "metadata",
                    "input",
                    "output",
                    "request",
                    "x",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=12,
)


def assert_not_500(status: int, text: str) -> None:
    assert status < 500, text
    assert status != 200 or text  # every answer but 204 has a body


@pytest.fixture(scope="module")
def headers_for(server: Any) -> dict[str, dict[str, str]]:
    api = Api(server)
    session_id = api.session(user="fz")
    api.start("fuzz", session_id=session_id)
    live = token(api.claim("fuzz")["token"])
    merged = {**api.member, **live}
    api.close()
    return {"member": api.member, "admin": api.admin, "worker": api.worker, "both": merged, "none": {}}


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    route=st.sampled_from(ROUTES),
    body=json_values,
    who=st.sampled_from(["member", "admin", "worker", "both"]),
    scope=st.sampled_from(["run", "session", "agent", "user", "nope", "%00"]),
    ident=st.sampled_from(["k", "a" * 201, "%2e%2e", "x:y", "%F0%9F%92%A9", "run_1"]),
)
def test_random_bodies_never_500(
    api: Api,
    headers_for: dict[str, dict[str, str]],
    route: tuple[str, str],
    body: Any,
    who: str,
    scope: str,
    ident: str,
) -> None:
    method, template = route
    path = template.replace("{scope}", scope).replace("{id}", ident)
    answer = api.http.request(method, path, content=json.dumps(body).encode(), headers=headers_for[who])
    assert_not_500(answer.status_code, answer.text)


RAW_BODIES = [
    b"",
    b"{",
    b"nul",
    b"[]",
    b"123",
    b'"s"',
    b'{"value": 1e999}',
    b'{"value": -9223372036854775809}',
    b"\xff\xfe",
    b'{"a": "\\ud800"}',
    b"{" * 5000,
    b'{"agents": "chat"}',
    b'{"agents": []}',
    b'{"agents": ["a"], "wait": "abc"}',
    b'{"agents": ["a"], "wait": -1}',
    b'{"agents": ["a"], "wait": 1e308}',
    b'{"role": "god"}',
    b'{"approved": "yes"}',
    b'{"error": "x"}',
    b'{"items": null}',
    b'{"value": 1, "if_version": "1"}',
    b'{"value": 1, "if_version": true}',
    b'{"agent": ""}',
]


@pytest.mark.parametrize("raw", RAW_BODIES)
def test_raw_bodies_on_every_route_never_500(api: Api, headers_for: dict[str, dict[str, str]], raw: bytes) -> None:
    for method, template in ROUTES:
        path = template.replace("{scope}", "agent").replace("{id}", "k")
        answer = api.http.request(method, path, content=raw, headers=headers_for["both"])
        assert_not_500(answer.status_code, answer.text)
        if answer.status_code >= 400:
            assert isinstance(answer.json()["error"], str)


BAD_QUERIES = [
    "limit=-1",
    "limit=0",
    "limit=abc",
    "limit=99999999999999999999",
    "wait=abc",
    "wait=-1",
    "wait=nan",
    "wait=inf",
    "wait=1e999",
    "after=xyz",
    "after=-5",
    "status=bogus",
    "user=%00",
    "session_id=a%20b",
    "prefix=%FF",
    "if_version=-1",
    "if_version=x",
    "after=99999999999999999999999",
]


@pytest.mark.parametrize("query", BAD_QUERIES)
def test_bad_query_params_are_400_never_500(api: Api, headers_for: dict[str, dict[str, str]], query: str) -> None:
    for path in ("/v0/sessions", "/v0/runs", "/v0/runs/nope", "/v0/state/agent", "/v0/state/agent/k"):
        for method in ("GET", "DELETE"):
            answer = api.http.request(method, f"{path}?{query}", headers=headers_for["both"])
            assert_not_500(answer.status_code, answer.text)


def test_unknown_routes_and_methods(api: Api) -> None:
    for method, path in [
        ("GET", "/"),
        ("GET", "/v1/runs"),
        ("PUT", "/v0/runs"),
        ("POST", "/v0/state/agent/k"),
        ("GET", "/v0/state"),
        ("POST", "/healthz"),
        ("GET", "/v0/state/agent/k/append/x"),
    ]:
        answer = api.http.request(method, path)
        assert answer.status_code in (404, 405) and answer.json()["error"] in ("not_found", "invalid_request")


def test_operations_endpoints(api: Api) -> None:
    assert api.http.get("/healthz").json() == {"ok": True}
    assert api.http.get("/readyz").status_code == 200
    metrics = api.http.get("/metrics").text
    assert 'route="/v0/state/{scope}/{key}"' in metrics and "keepstate_http_request_seconds_bucket" in metrics
    document = api.http.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
