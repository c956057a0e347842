"""The console's rules over plain HTTP against a real ``keepstate serve``: forged forms refused with
nothing changed, the cookie's flags, who may sign in, error pages (never a 500), the status poll's
visibility, and ``--no-console``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from console_support import Console, bearer, form_value

from keepstate.server.console.render import CSP
from serverproc import ServerInfo, running_server

FORM = {"content-type": "application/x-www-form-urlencoded"}


@pytest.fixture
def member(console: Console) -> str:
    return console.new_key("member")[1]


@pytest.fixture
def worker(console: Console) -> str:
    return console.new_key("worker")[1]


def held_run(console: Console, member: str, worker: str) -> dict[str, Any]:
    """A run of a fresh agent, claimed and held through the API as a worker would."""
    agent = f"hold-{uuid.uuid4().hex[:8]}"
    run = console.api("POST", "/v0/runs", member, json={"agent": agent})
    claimed = console.api("POST", "/v0/invocations/claim", worker, json={"agents": [agent], "wait": 5})
    answer = console.http.post(
        f"/v0/invocations/{claimed['id']}/hold",
        json={"request": {"q": "ok?"}},
        headers={"x-agentos-run-token": claimed["token"]},
    )
    assert answer.status_code == 200, answer.text
    return dict(run)


def status_of(console: Console, run_id: str, key: str) -> str:
    return str(console.api("GET", f"/v0/runs/{run_id}", key)["status"])


def test_forged_forms_are_refused_and_change_nothing(console: Console, member: str, worker: str) -> None:
    run = held_run(console, member, worker)
    csrf = console.sign_in(member)
    decision = f"/console/runs/{run['id']}/decision"
    forged = [
        ({"decision": "approve"}, "self"),  # no token
        ({"decision": "approve", "csrf": "x" + csrf[1:]}, "self"),  # a wrong token
        ({"decision": "approve", "csrf": csrf}, "https://evil.example"),  # another site's form
        ({"decision": "approve", "csrf": csrf}, None),  # no Origin, no Referer
    ]
    for fields, origin in forged:
        answer = console.post(decision, fields, origin)
        assert answer.status_code == 403, (fields, origin, answer.text)
        assert answer.headers["content-type"].startswith("text/html")
        assert status_of(console, run["id"], member) == "held"
    assert console.post(f"/console/runs/{run['id']}/cancel", {}).status_code == 403
    assert console.post("/console/sign-out", {"csrf": "nope"}).status_code == 403
    assert status_of(console, run["id"], member) == "held"
    assert console.http.get("/console/sessions").status_code == 200  # still signed in
    answer = console.http.post(
        decision,
        data={"decision": "approve", "csrf": csrf},
        headers={"Referer": f"{console.url}/console/runs/{run['id']}"},
    )
    assert answer.status_code == 303  # the same form, sent from this console: done
    assert status_of(console, run["id"], member) == "queued"


def test_forged_key_creation_by_an_admin_creates_nothing(console: Console) -> None:
    csrf = console.sign_in(console.admin)
    before = console.api("GET", "/v0/keys", console.admin)["keys"]
    assert console.post("/console/keys", {"role": "admin", "name": "forged"}).status_code == 403
    assert console.post("/console/keys", {"role": "admin", "csrf": csrf}, "https://evil.example").status_code == 403
    target = before[-1]["id"]
    assert console.post(f"/console/keys/{target}/revoke", {"csrf": csrf + "x"}).status_code == 403
    assert console.api("GET", "/v0/keys", console.admin)["keys"] == before


def test_a_key_name_past_200_characters_is_the_same_400_as_in_the_api(console: Console) -> None:
    csrf = console.sign_in(console.admin)
    before = console.api("GET", "/v0/keys", console.admin)["keys"]
    answer = console.post("/console/keys", {"role": "member", "name": "n" * 201, "csrf": csrf})
    assert answer.status_code == 400 and "at most 200 characters" in answer.text
    assert console.api("GET", "/v0/keys", console.admin)["keys"] == before


def test_the_sign_in_form_cannot_be_forged(console: Console, member: str) -> None:
    page = console.http.get("/console/")
    value = form_value(page.text)
    for fields, origin in [
        ({"key": member}, "self"),
        ({"key": member, "form": value + "x"}, "self"),
        ({"key": member, "form": value}, "https://evil.example"),
    ]:
        answer = console.post("/console/sign-in", fields, origin)
        assert answer.status_code == 403, answer.text
        assert "keepstate_console=" not in answer.headers.get("set-cookie", "")
    assert console.post("/console/sign-in", {"key": member, "form": value}).status_code == 303


def cookie_named(answer: httpx.Response, name: str) -> str:
    return next(c for c in answer.headers.get_list("set-cookie") if c.startswith(f"{name}="))


def test_the_cookie_is_httponly_strict_and_secure_over_https(console: Console, member: str) -> None:
    """Over HTTPS (here: a proxy on this machine saying so, which uvicorn trusts from 127.0.0.1 only)
    both cookies are Secure; an httpx client would not send a Secure cookie back over plain HTTP, so
    the form's cookie is sent by hand, as the browser on HTTPS would."""
    for proto, secure in (("http", False), ("https", True)):
        console.http.cookies.clear()
        page = console.http.get("/console/", headers={"X-Forwarded-Proto": proto})
        form_cookie = cookie_named(page, "keepstate_console_form")
        assert form_cookie.endswith("; Secure") is secure
        answer = console.http.post(
            "/console/sign-in",
            data={"key": member, "form": form_value(page.text)},
            headers={"Origin": console.url, "X-Forwarded-Proto": proto, "Cookie": form_cookie.split(";", 1)[0]},
        )
        assert answer.status_code == 303, answer.text
        session = cookie_named(answer, "keepstate_console")
        assert "; Path=/console/; Max-Age=43200; HttpOnly; SameSite=Strict" in session
        assert session.endswith("; Secure") is secure
        assert member not in session and member not in answer.headers["location"]
        token = session.split(";", 1)[0].split("=", 1)[1]
        assert len(token) >= 43  # 256 random bits


def test_a_worker_key_cannot_sign_in(console: Console, worker: str) -> None:
    page = console.http.get("/console/")
    answer = console.post("/console/sign-in", {"key": worker, "form": form_value(page.text)})
    assert answer.status_code == 403
    assert "admin or member key" in answer.text
    assert "keepstate_console=" not in answer.headers.get("set-cookie", "")


def test_bad_requests_get_error_pages_never_a_500(console: Console, member: str, worker: str) -> None:
    run = held_run(console, member, worker)
    done = console.api("POST", "/v0/runs", member, json={"agent": "never"})
    console.api("POST", f"/v0/runs/{done['id']}/cancel", member)
    csrf = console.sign_in(member)
    cases: list[tuple[str, str, dict[str, Any], int]] = [
        ("GET", "/console/sessions?after=abc", {}, 400),
        ("GET", "/console/sessions?user=not%20a%20name", {}, 400),
        ("GET", "/console/runs?status=bogus", {}, 400),
        ("GET", "/console/runs?agent=%3Cb%3E", {}, 400),
        ("GET", f"/console/runs/{run['id']}?key=draft&end=-1", {}, 400),
        ("GET", "/console/sessions/no-such-session", {}, 404),
        ("GET", "/console/runs/no%20such", {}, 404),
        ("GET", "/console/static/000000000000/console.js", {}, 404),
        ("GET", "/console/nowhere/at/all", {}, 404),
        ("PUT", "/console/sessions", {}, 405),
        ("GET", "/console/keys", {}, 403),
        ("POST", f"/console/runs/{run['id']}/decision", {"json": {"decision": "approve", "csrf": csrf}}, 400),
        ("POST", f"/console/runs/{run['id']}/decision", {"data": {"decision": "maybe", "csrf": csrf}}, 400),
        ("POST", f"/console/runs/{done['id']}/decision", {"data": {"decision": "approve", "csrf": csrf}}, 409),
        ("POST", f"/console/runs/{run['id']}/decision", {"content": b"csrf=" + b"x" * (3 << 20), "headers": FORM}, 413),
        ("POST", f"/console/runs/{run['id']}/decision", {"content": b"csrf=%ff%fe", "headers": FORM}, 400),
    ]
    for method, path, kwargs, status in cases:
        headers = {"Origin": console.url, **kwargs.pop("headers", {})}
        answer = console.http.request(method, path, headers=headers, **kwargs)
        assert answer.status_code == status, (method, path, answer.status_code, answer.text[:500])
        assert answer.headers["content-type"].startswith("text/html"), path
        assert answer.headers["content-security-policy"] == CSP, path
    assert console.http.request("PUT", "/console/sessions").headers["allow"] == "GET, HEAD"
    assert status_of(console, run["id"], member) == "held"


def test_a_fork_form_that_cannot_be_done_is_an_error_page_and_makes_no_session(console: Console, member: str) -> None:
    user = f"forkform-{uuid.uuid4().hex[:6]}"
    source = console.api("POST", "/v0/sessions", member, json={"user": user})
    state = f"/v0/sessions/{source['id']}/state/chat"
    console.api("POST", f"{state}/history/append", member, json={"items": [1, 2, 3]})
    console.api("PUT", f"{state}/profile", member, json={"value": {"plan": "pro"}})
    csrf = console.sign_in(member)
    fork = f"/console/sessions/{source['id']}/fork"
    for fields, status, said in (
        ({"keep": "2"}, 400, "choose the list to cut"),
        ({"list": "chat/history"}, 400, "how many items of chat/history"),
        ({"list": "chat/history", "keep": "-1"}, 400, "how many items"),
        ({"list": "chat/history", "keep": "1e3"}, 400, "how many items"),
        ({"list": "chat/history", "keep": "\u0663"}, 400, "how many items"),  # a digit, not an ASCII one
        ({"list": "chat/history", "keep": "9" * 11}, 400, "how many items"),
        ({"list": "chat/history", "keep": "9" * 10}, 400, "an integer from 0 to"),
        ({"list": "history", "keep": "1"}, 400, "AGENT/KEY"),
        ({"list": "chat/profile", "keep": "1"}, 409, "not a list"),
    ):
        answer = console.post(fork, {**fields, "csrf": csrf})
        assert answer.status_code == status, (fields, answer.text[:500])
        assert said in answer.text, (fields, answer.text[:2000])
    assert [s["id"] for s in console.api("GET", f"/v0/sessions?user={user}", member)["sessions"]] == [source["id"]]
    made = console.post(fork, {"list": "chat/history", "keep": "0", "csrf": csrf})
    assert made.status_code == 303
    fork_id = made.headers["location"].rsplit("/", 1)[1]
    assert console.api("GET", f"/v0/sessions/{fork_id}/state/chat/history", member)["value"] == []
    assert console.api("GET", f"{state}/history", member)["value"] == [1, 2, 3]


def test_the_status_poll_answers_only_for_runs_the_caller_may_see(console: Console, member: str) -> None:
    own = console.api("POST", "/v0/runs", member, json={"agent": "poll-a"})
    other_member = console.new_key("member")[1]
    theirs = console.api("POST", "/v0/runs", other_member, json={"agent": "poll-b"})
    console.sign_in(member)
    answer = console.http.get("/console/runs/status", params={"ids": f"{own['id']},{theirs['id']},no<such>,"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    assert answer.headers["cache-control"] == "no-store"
    expected = {own["id"]: {"status": "queued", "updated_at": own["updated_at"]}}
    assert answer.json() == {"runs": expected, "waiting": "0"}
    console.http.cookies.clear()
    refused = console.http.get("/console/runs/status", params={"ids": own["id"]})
    assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"


def test_sign_in_keeps_no_secret_in_the_store_or_the_page(console: Console, member: str) -> None:
    page = console.http.get("/console/")
    answer = console.post("/console/sign-in", {"key": member, "form": form_value(page.text)})
    assert answer.status_code == 303
    sessions = console.http.get("/console/sessions")
    assert member not in sessions.text
    keys = console.api("GET", "/v0/keys", console.admin)["keys"]
    assert all(member not in str(key) for key in keys)


@pytest.fixture(scope="module")
def consoleless() -> Iterator[ServerInfo]:
    with running_server("memory://", extra_args=("--no-console",)) as info:
        yield info


def test_no_console_serves_the_api_alone(consoleless: ServerInfo) -> None:
    with httpx.Client(base_url=consoleless.url) as http:
        assert http.get("/console/").status_code == 404
        assert http.get("/console/").headers["content-type"] == "application/json"
        assert http.get("/v0/keys", headers=bearer(consoleless.admin_key)).status_code == 200


def test_a_revoked_key_ends_its_console_sessions(console: Console) -> None:
    key_id, secret = console.new_key("member")
    console.sign_in(secret)
    assert console.http.get("/console/runs").status_code == 200
    assert console.http.delete(f"/v0/keys/{key_id}", headers=bearer(console.admin)).status_code == 204
    answer = console.http.get("/console/runs")
    assert (answer.status_code, answer.headers["location"]) == (303, "/console/")
    assert console.http.get("/console/runs/status").status_code == 401
