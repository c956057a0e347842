"""The lifecycle calls of one real server over SQLite: session metadata, agents, queue timeouts, metrics.

Who may call what and what a bad body gets (the spec's codes, never a 500); the state a user sees
after a run expires; the metric families an operator alerts on.
"""

from __future__ import annotations

import pytest
from server_helpers import Api

from keepstate.clock import now_ms


def test_patch_replaces_a_sessions_metadata_for_its_owner_and_admins(api: Api) -> None:
    session_id = api.session(metadata={"title": "old", "n": 1})
    answer = api.http.patch(f"/v0/sessions/{session_id}", json={"metadata": {"title": "new"}}, headers=api.member)
    assert answer.status_code == 200, answer.text
    assert answer.json()["metadata"] == {"title": "new"} and answer.json()["id"] == session_id
    assert api.http.get(f"/v0/sessions/{session_id}", headers=api.member).json()["metadata"] == {"title": "new"}
    by_admin = api.http.patch(f"/v0/sessions/{session_id}", json={"metadata": {}}, headers=api.admin)
    assert by_admin.status_code == 200 and by_admin.json()["metadata"] == {}
    other = {"Authorization": f"Bearer {api.new_key('member')}"}
    hidden = api.http.patch(f"/v0/sessions/{session_id}", json={"metadata": {"x": 1}}, headers=other)
    assert hidden.status_code == 404 and hidden.json()["error"] == "not_found"
    assert api.http.patch("/v0/sessions/nope", json={"metadata": {}}, headers=api.member).status_code == 404
    assert api.http.patch(f"/v0/sessions/{session_id}", json={"metadata": {}}, headers=api.worker).status_code == 403
    assert api.http.patch(f"/v0/sessions/{session_id}", json={"metadata": {}}).status_code == 401


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("{}", "invalid_request"),
        ('{"metadata": [1]}', "invalid_request"),
        ('{"metadata": null}', "invalid_request"),
        ('{"metadata": "x"}', "invalid_request"),
        ('{"metadata": {"a": Infinity}}', "invalid_value"),
        ("[]", "invalid_request"),
        ("not json", "invalid_value"),
    ],
)
def test_patch_refuses_what_create_refuses(api: Api, body: str, code: str) -> None:
    session_id = api.session(metadata={"keep": True})
    answer = api.http.patch(f"/v0/sessions/{session_id}", content=body, headers=api.member)
    assert answer.status_code == 400 and answer.json()["error"] == code, answer.text
    assert api.http.get(f"/v0/sessions/{session_id}", headers=api.member).json()["metadata"] == {"keep": True}


def test_patch_over_a_mebibyte_is_too_large(api: Api) -> None:
    session_id = api.session()
    answer = api.http.patch(
        f"/v0/sessions/{session_id}", json={"metadata": {"big": "x" * 1_100_000}}, headers=api.member
    )
    assert answer.status_code == 413 and answer.json()["error"] == "too_large"


@pytest.mark.parametrize(
    ("timeout", "code"),
    [
        ("0", "invalid_request"),
        ("0.5", "invalid_request"),
        ("86401", "invalid_request"),
        ('"5"', "invalid_request"),
        ("true", "invalid_request"),
        ("[]", "invalid_request"),
        ("-3", "invalid_request"),
        ("NaN", "invalid_value"),
        ("1e400", "invalid_value"),
    ],
)
def test_a_queue_timeout_out_of_range_is_refused(api: Api, timeout: str, code: str) -> None:
    content = f'{{"agent": "chat", "queue_timeout": {timeout}}}'
    answer = api.http.post("/v0/runs", content=content, headers=api.member)
    assert answer.status_code == 400 and answer.json()["error"] == code, answer.text


def test_a_queue_timeout_of_null_one_second_or_a_day_is_taken(api: Api) -> None:
    for timeout, ms in ((None, 600_000), (1, 1_000), (2.5, 2_500), (86_400, 86_400_000)):
        run = api.start("chat", queue_timeout=timeout)
        assert run["queue_deadline"] - run["created_at"] == ms


def test_a_run_nobody_serves_expires_and_the_session_goes_on(api: Api) -> None:
    session_id = api.session()
    run = api.start("nobody-serves-this", session_id=session_id, queue_timeout=1)
    assert run["status"] == "queued" and run["queue_deadline"] - run["created_at"] == 1000
    expired = api.run(run["id"], wait=60)  # returns once it expired; 60 s only bounds a hang
    assert expired["status"] == "expired"
    assert expired["updated_at"] >= run["queue_deadline"]
    assert api.http.post(f"/v0/runs/{run['id']}/cancel", headers=api.member).json()["status"] == "expired"
    decided = api.http.post(f"/v0/runs/{run['id']}/decision", json={"approved": True}, headers=api.member)
    assert decided.status_code == 409 and decided.json()["error"] == "not_held"
    listed = api.http.get("/v0/runs", params={"status": "expired", "session_id": session_id}, headers=api.member)
    assert [found["id"] for found in listed.json()["runs"]] == [run["id"]]
    assert api.start("chat", session_id=session_id)["status"] == "queued"
    assert api.http.delete(f"/v0/sessions/{session_id}", headers=api.member).status_code == 409  # that one is live


def test_agents_lists_claimed_agents_and_agents_with_runs(api: Api) -> None:
    agent = f"lister-{now_ms()}"
    api.start(agent)
    api.start(agent)
    inv = api.claim(agent)
    idle = f"idle-{now_ms()}"
    assert api.http.post("/v0/invocations/claim", json={"agents": [idle]}, headers=api.worker).status_code == 204
    answer = api.http.get("/v0/agents", headers=api.member)
    assert answer.status_code == 200, answer.text
    agents = {found["name"]: found for found in answer.json()["agents"]}
    assert {k: agents[agent][k] for k in ("queued", "running", "held")} == {"queued": 1, "running": 1, "held": 0}
    assert agents[agent]["last_claim_at"] is not None and agents[agent]["last_claim_at"] <= now_ms()
    assert (
        agents[idle]
        == {"name": idle, "last_claim_at": agents[idle]["last_claim_at"], "queued": 0, "running": 0, "held": 0}
        and agents[idle]["last_claim_at"] is not None
    )
    api.end(inv, "hold", request={"ask": 1})
    held = {found["name"]: found for found in api.http.get("/v0/agents", headers=api.admin).json()["agents"]}
    assert (held[agent]["running"], held[agent]["held"]) == (0, 1)
    assert api.http.get("/v0/agents", headers=api.worker).status_code == 403
    assert api.http.get("/v0/agents").status_code == 401


def test_metrics_show_runs_queue_age_store_latency_and_sweeps(api: Api) -> None:
    agent = f"metered-{now_ms()}"
    api.start(agent)
    text = api.http.get("/metrics").text
    assert f'keepstate_runs{{agent="{agent}",env="default",status="queued"}} 1.0' in text
    assert f'keepstate_queue_oldest_seconds{{agent="{agent}",env="default"}}' in text
    assert 'keepstate_store_seconds_bucket{le="0.0001",operation="platform.start_run"}' in text
    assert 'keepstate_store_seconds_count{operation="platform.key_by_hash"}' in text
    for name in ("expired", "interrupted", "purged"):
        assert f"keepstate_sweep_{name}_total" in text


def test_openapi_documents_the_new_calls(api: Api) -> None:
    document = api.http.get("/openapi.json").json()
    assert "patch" in document["paths"]["/v0/sessions/{id}"]
    assert "get" in document["paths"]["/v0/agents"]
    assert "expired" in document["components"]["schemas"]["Run"]["properties"]["status"]["enum"]
    runs_body = document["paths"]["/v0/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert runs_body["properties"]["queue_timeout"] == {"type": "number", "minimum": 1, "maximum": 86_400}
