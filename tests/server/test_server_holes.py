"""Holes an attacker found, each reproduced against a real server, each closed at its root.

- A session id deleted and created again by someone else must not hand the old owner's held run
  the new owner's session state, nor let that run's resume block the new owner's turns.
- A percent-encoded ``/`` in a state path is part of one segment: never a route step.
- Every credential is checked before a body is read: a call without a valid one is 401 whatever
  its body (a NaN, a body too large).
"""

from __future__ import annotations

import pytest
from server_helpers import Api, token

MIB = 1024 * 1024


def test_a_session_id_created_again_starts_empty_and_the_old_held_run_is_cancelled(api: Api) -> None:
    member_b = {"Authorization": f"Bearer {api.new_key('member')}"}
    sid = f"reused-{api.new_key('member')[-8:]}"
    api.session(id=sid)  # member A
    run_a = api.start("reuse-g", session_id=sid)
    inv_a = api.claim("reuse-g")
    note = api.http.put("/v0/state/session/a-note", json={"value": "a"}, headers=token(inv_a["token"]))
    assert note.status_code == 200
    assert api.end(inv_a, "hold", request={"ok?": True}).status_code == 200
    assert api.http.delete(f"/v0/sessions/{sid}", headers=api.member).status_code == 204
    assert api.run(run_a["id"])["status"] == "cancelled"  # a held run dies with its session

    assert api.http.post("/v0/sessions", json={"id": sid}, headers=member_b).status_code == 201
    run_b = api.start("reuse-g", headers=member_b, session_id=sid)
    inv_b = api.claim("reuse-g")
    assert inv_b["run_id"] == run_b["id"]
    b_token = token(inv_b["token"])
    assert api.http.get("/v0/state/session/a-note", headers=b_token).status_code == 404  # empty, whoever creates it
    api.http.put("/v0/state/session/b-secret", json={"value": "b"}, headers=b_token)
    assert api.end(inv_b, output="ok").status_code == 200

    decided = api.http.post(f"/v0/runs/{run_a['id']}/decision", json={"approved": True}, headers=api.member)
    assert decided.status_code == 409 and decided.json()["error"] == "not_held"
    assert (
        api.http.post("/v0/runs", json={"agent": "reuse-g", "session_id": sid}, headers=member_b).status_code == 202
    )  # never blocked by A's old run


@pytest.mark.parametrize("path", ["victim%2Fappend", "victim%2fappend", "a%2Fb", "%2E%2E%2Fx", "k%00"])
def test_an_encoded_slash_is_part_of_the_key_never_a_route_step(api: Api, path: str) -> None:
    session_id = api.session()
    api.start("slash", session_id=session_id)
    headers = token(api.claim("slash")["token"])
    assert api.http.put("/v0/state/session/victim", json={"value": [0]}, headers=headers).status_code == 200
    for method, url, body in (
        ("POST", f"/v0/state/session/{path}", {"items": [1]}),
        ("PUT", f"/v0/state/session/{path}", {"value": 1}),
        ("GET", f"/v0/state/session/{path}", None),
        ("DELETE", f"/v0/state/session/{path}", None),
        ("POST", f"/v0/state/session/{path}/append", {"items": [1]}),
    ):
        answer = api.http.request(method, url, json=body, headers=headers)
        assert answer.status_code in (400, 405), (method, url, answer.text)
        if answer.status_code == 400:
            assert answer.json()["error"] == "invalid_key", (method, url, answer.text)
    assert api.http.get("/v0/state/session/victim", headers=headers).json() == {"value": [0], "version": 1}


NAN = b'{"output": NaN}'
HEAVY = b'{"output": [' + b",".join([b"{}"] * 700_000) + b"]}"


@pytest.mark.parametrize("action", ["complete", "fail", "hold", "heartbeat"])
@pytest.mark.parametrize("body", [NAN, HEAVY, b"{", b"x" * (3 * MIB)], ids=["nan", "heavy", "broken", "huge"])
@pytest.mark.parametrize("credential", [None, "kst_forged"])
def test_invocation_calls_check_the_token_before_the_body(
    api: Api, action: str, body: bytes, credential: str | None
) -> None:
    api.start("tokfirst")
    inv = api.claim("tokfirst")
    headers = {} if credential is None else token(credential)
    answer = api.http.post(f"/v0/invocations/{inv['id']}/{action}", content=body, headers=headers)
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"] == "unauthorized"
    assert api.end(inv, output=1).status_code == 200  # the real token still works


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/v0/state/agent/k"),
        ("POST", "/v0/state/agent/k/append"),
        ("POST", "/v0/runs"),
        ("POST", "/v0/sessions"),
        ("POST", "/v0/keys"),
        ("POST", "/v0/invocations/claim"),
        ("POST", "/v0/runs/r/decision"),
        ("POST", "/v0/runs/r/cancel"),
    ],
)
@pytest.mark.parametrize("body", [NAN, b"x" * (3 * MIB)], ids=["nan", "huge"])
def test_every_route_refuses_a_missing_credential_before_its_body(
    api: Api, method: str, path: str, body: bytes
) -> None:
    answer = api.http.request(method, path, content=body, headers={"Authorization": "Bearer ks_forged"})
    assert answer.status_code == 401, (method, path, answer.text)
    answer = api.http.request(method, path, content=body)
    assert answer.status_code == 401, (method, path, answer.text)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/v0/runs", {"GET", "HEAD", "POST"}),
        ("PUT", "/v0/sessions", {"GET", "HEAD", "POST"}),
        ("POST", "/v0/sessions/s1", {"GET", "HEAD", "PATCH", "DELETE"}),
        ("PATCH", "/v0/keys", {"GET", "HEAD", "POST"}),
        ("POST", "/v0/state/session/k", {"GET", "HEAD", "PUT", "PATCH", "DELETE"}),
        ("PUT", "/v0/state/session", {"GET", "HEAD"}),
        ("GET", "/v0/state/session/k/append", {"POST"}),
    ],
)
def test_a_405_lists_every_method_of_the_path(api: Api, method: str, path: str, allowed: set[str]) -> None:
    answer = api.http.request(method, path, headers=api.member)
    assert answer.status_code == 405, answer.text
    assert {m.strip() for m in answer.headers["allow"].split(",")} == allowed
    assert answer.json()["error"] == "invalid_request"


@pytest.mark.parametrize("path", ["/v0/runs/x%2Fcancel", "/v0/sessions/a%2Fb", "/v0/invocations/i%2Fcomplete"])
def test_an_encoded_slash_outside_the_state_api_names_nothing(api: Api, path: str) -> None:
    answer = api.http.post(path, json={}, headers=api.member)
    assert answer.status_code == 404 and answer.json()["error"] == "not_found"
