"""Every error code of the spec, provoked over HTTP against a real server, with its details."""

from __future__ import annotations

import socket

import pytest
from server_helpers import Api, bearer, error_of, token

MIB = 1024 * 1024


@pytest.fixture
def live(api: Api) -> dict[str, str]:
    """A run token of a running invocation (with a session and a user)."""
    session_id = api.session(user=api.user)
    api.start("errs", session_id=session_id)
    return token(api.claim("errs")["token"])


def test_invalid_key(api: Api, live: dict[str, str]) -> None:
    error_of(api.http.get("/v0/state/agent/bad%20key", headers=live), 400, "invalid_key")
    error_of(api.http.put("/v0/state/agent/" + "k" * 201, json={"value": 1}, headers=live), 400, "invalid_key")
    error_of(api.http.get("/v0/state/agent?prefix=a%2Fb", headers=live), 400, "invalid_key")


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (b'{"value": NaN}', "$.value"),
        (b'{"value": [1, 1e400]}', "$.value[1]"),
        (b'{"value": {"n": 9223372036854775808}}', "$.value.n"),
        (b'{"value": "a\\u0000b"}', "$.value"),
        (b'{"value": {"s": "\\ud800"}}', "$.value.s"),
        (b"not json", "$"),
        (b"[" * 200 + b"]" * 200, None),
    ],
)
def test_invalid_value_with_path(api: Api, live: dict[str, str], body: bytes, path: str | None) -> None:
    answer = api.http.put("/v0/state/agent/k", content=body, headers=live)
    found = error_of(answer, 400, "invalid_value")
    assert found["path"].startswith("$")
    if path is not None:
        assert found["path"] == path


def test_values_nest_as_deep_over_http_as_embedded(api: Api, live: dict[str, str]) -> None:
    from keepstate.values import MAX_DEPTH

    deepest = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert api.http.put("/v0/state/agent/k", content=b'{"value": ' + deepest + b"}", headers=live).status_code == 200
    too_deep = b'{"value": [' + deepest + b"]}"
    found = error_of(api.http.put("/v0/state/agent/k", content=too_deep, headers=live), 400, "invalid_value")
    assert found["path"] == "$.value" + "[0]" * MAX_DEPTH


def test_invalid_value_in_append_items_has_its_path(api: Api, live: dict[str, str]) -> None:
    body = b'{"items": [1, 2, 3, {"name": Infinity}]}'
    found = error_of(api.http.post("/v0/state/agent/l/append", content=body, headers=live), 400, "invalid_value")
    assert found["path"] == "$.items[3].name"


def test_invalid_request(api: Api, live: dict[str, str]) -> None:
    error_of(api.http.put("/v0/state/agent/k", json={"nope": 1}, headers=live), 400, "invalid_request")
    error_of(api.http.put("/v0/state/agent/k", json=[1], headers=live), 400, "invalid_request")
    error_of(api.http.get("/v0/state/galaxy/k", headers=live), 400, "invalid_request")
    error_of(api.http.post("/v0/runs", json={"input": 1}, headers=api.member), 400, "invalid_request")
    error_of(api.http.post("/v0/state/agent/l/append", json={"items": 5}, headers=live), 400, "invalid_request")
    error_of(
        api.http.put("/v0/state/agent/k", json={"value": 1, "if_version": -1}, headers=live), 400, "invalid_request"
    )


def test_unauthorized(api: Api) -> None:
    error_of(api.http.get("/v0/sessions"), 401, "unauthorized")
    error_of(api.http.get("/v0/sessions", headers=bearer("ks_nope")), 401, "unauthorized")
    error_of(api.http.get("/v0/state/agent/k", headers=token("kst_nope")), 401, "unauthorized")
    error_of(api.http.get("/v0/state/agent/k"), 401, "unauthorized")


def test_forbidden(api: Api) -> None:
    error_of(api.http.post("/v0/keys", json={"role": "member"}, headers=api.member), 403, "forbidden")
    error_of(api.http.get("/v0/keys", headers=api.worker), 403, "forbidden")
    error_of(api.http.post("/v0/runs", json={"agent": "a"}, headers=api.worker), 403, "forbidden")
    error_of(api.http.post("/v0/invocations/claim", json={"agents": ["a"]}, headers=api.member), 403, "forbidden")


def test_not_found(api: Api, live: dict[str, str]) -> None:
    error_of(api.http.get("/v0/state/agent/absent", headers=live), 404, "not_found")
    error_of(api.http.get("/v0/sessions/nope", headers=api.member), 404, "not_found")
    error_of(api.http.get("/v0/runs/nope", headers=api.member), 404, "not_found")
    error_of(api.http.get("/v0/no/such/route"), 404, "not_found")
    error_of(api.http.post("/v0/runs", json={"agent": "a", "session_id": "nope"}, headers=api.member), 404, "not_found")
    assert api.http.delete("/v0/state/agent/absent", headers=live).status_code == 204


def test_version_conflict_with_current_version(api: Api, live: dict[str, str]) -> None:
    assert api.http.put("/v0/state/agent/cas", json={"value": 1}, headers=live).json() == {"version": 1}
    found = error_of(
        api.http.put("/v0/state/agent/cas", json={"value": 2, "if_version": 0}, headers=live), 409, "version_conflict"
    )
    assert found["current_version"] == 1
    found = error_of(api.http.delete("/v0/state/agent/cas?if_version=7", headers=live), 409, "version_conflict")
    assert found["current_version"] == 1
    absent = api.http.put("/v0/state/agent/none", json={"value": 2, "if_version": 3}, headers=live)
    assert error_of(absent, 409, "version_conflict")["current_version"] == 0


def test_not_a_list(api: Api, live: dict[str, str]) -> None:
    api.http.put("/v0/state/agent/scalar", json={"value": {"a": 1}}, headers=live)
    error_of(api.http.post("/v0/state/agent/scalar/append", json={"items": [1]}, headers=live), 409, "not_a_list")


def test_no_session_and_no_user(api: Api) -> None:
    api.start("lonely")
    lonely = token(api.claim("lonely")["token"])
    error_of(api.http.get("/v0/state/session/k", headers=lonely), 409, "no_session")
    error_of(api.http.put("/v0/state/user/k", json={"value": 1}, headers=lonely), 409, "no_user")


def test_session_busy_and_not_held(api: Api) -> None:
    session_id = api.session()
    run = api.start("busy", session_id=session_id)
    error_of(
        api.http.post("/v0/runs", json={"agent": "busy", "session_id": session_id}, headers=api.member),
        409,
        "session_busy",
    )
    error_of(
        api.http.post(f"/v0/runs/{run['id']}/decision", json={"approved": True}, headers=api.member), 409, "not_held"
    )


def test_too_large_value_append_and_body(api: Api, live: dict[str, str]) -> None:
    big = "x" * MIB
    error_of(api.http.put("/v0/state/agent/big", json={"value": big}, headers=live), 413, "too_large")
    half = "y" * (MIB // 2)
    assert api.http.post("/v0/state/agent/grow/append", json={"items": [half]}, headers=live).status_code == 200
    error_of(api.http.post("/v0/state/agent/grow/append", json={"items": [half]}, headers=live), 413, "too_large")
    assert api.http.get("/v0/state/agent/grow", headers=live).json()["version"] == 1  # nothing added
    error_of(api.http.put("/v0/state/agent/huge", content=b" " * (3 * MIB), headers=live), 413, "too_large")


def test_too_large_body_refused_before_it_is_read_whole(api: Api, live: dict[str, str]) -> None:
    """A body announced at 1 GiB is refused at once, without the client sending it."""
    host, port = api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = (
            f"PUT /v0/state/agent/k HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"x-agentos-run-token: {live['x-agentos-run-token']}\r\nContent-Length: {2**30}\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"value": "')
        answer = _read_answer(sock)
    assert answer.startswith("HTTP/1.1 413") and "too_large" in answer


def _read_answer(sock: socket.socket) -> str:
    """The whole answer: headers, then as many body bytes as Content-Length says (maybe in several packets)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return (head + b"\r\n\r\n" + body).decode()


def test_method_not_allowed_is_json(api: Api) -> None:
    answer = api.http.patch("/v0/sessions")
    assert answer.status_code == 405 and answer.json()["error"] == "invalid_request"
