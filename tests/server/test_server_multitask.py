"""Double-texting over HTTP against a real ``keepstate serve``: ``multitask`` on ``POST /v0/runs``.

Each test uses agents of its own name, as the module's server is shared: a claim never meets another
test's runs.
"""

from __future__ import annotations

from server_helpers import Api, error_of, token


def nothing_to_claim(api: Api, agent: str) -> bool:
    answer = api.http.post("/v0/invocations/claim", json={"agents": [agent], "wait": 0}, headers=api.worker)
    assert answer.status_code in (200, 204), answer.text
    return answer.status_code == 204


def test_enqueue_answers_queued_and_the_turns_run_in_order(api: Api) -> None:
    sid = api.session()
    first = api.start("mt-order", session_id=sid)
    queued = [api.start("mt-order", session_id=sid, multitask="enqueue") for _ in range(2)]
    assert [r["status"] for r in queued] == ["queued", "queued"]
    refused = api.http.post("/v0/runs", json={"agent": "mt-order", "session_id": sid}, headers=api.member)
    error_of(refused, 409, "session_busy")  # reject is still the default
    explicit = {"agent": "mt-order", "session_id": sid, "multitask": "reject"}
    error_of(api.http.post("/v0/runs", json=explicit, headers=api.member), 409, "session_busy")
    for run in [first, *queued]:
        inv = api.claim("mt-order")
        assert (inv["run_id"], inv["kind"]) == (run["id"], "start")
        assert nothing_to_claim(api, "mt-order")  # the next turn waits for this one
        assert api.run(run["id"])["status"] == "running"
        assert api.end(inv, output={"n": 1}).status_code == 200
    listed = api.http.get("/v0/runs", params={"session_id": sid}, headers=api.member).json()["runs"]
    assert [(r["id"], r["status"]) for r in listed] == [(r["id"], "done") for r in [first, *queued]]


def test_interrupt_cancels_the_queued_turns_and_asks_the_running_one_to_stop(api: Api) -> None:
    sid = api.session()
    first = api.start("mt-stop", session_id=sid)
    running = api.claim("mt-stop")
    waiting = api.start("mt-stop", session_id=sid, multitask="enqueue")
    newest = api.start("mt-stop", session_id=sid, multitask="interrupt")
    assert newest["status"] == "queued"
    assert api.run(waiting["id"])["status"] == "cancelled"
    assert api.run(first["id"])["cancel_requested"] is True
    beat = api.http.post(f"/v0/invocations/{running['id']}/heartbeat", headers=token(running["token"]))
    assert beat.status_code == 200 and beat.json()["cancel_requested"] is True
    assert nothing_to_claim(api, "mt-stop")  # the interrupted run still runs until its worker ends it
    api.end(running, "fail", error={"type": "Cancelled", "message": "interrupted"})
    assert api.run(first["id"])["status"] == "cancelled"
    inv = api.claim("mt-stop")
    assert (inv["run_id"], inv["kind"]) == (newest["id"], "start")


def test_a_held_turn_is_not_interrupted_and_not_waited_for(api: Api) -> None:
    sid = api.session()
    held = api.start("mt-held", session_id=sid)
    api.end(api.claim("mt-held"), "hold", request={"question": "ok?"})
    newer = api.start("mt-held", session_id=sid, multitask="interrupt")
    assert api.run(held["id"])["status"] == "held"
    inv = api.claim("mt-held")
    assert inv["run_id"] == newer["id"]
    decided = api.http.post(f"/v0/runs/{held['id']}/decision", json={"approved": True}, headers=api.member)
    assert decided.status_code == 200  # a resume is still never refused, and runs beside the newer turn
    resume = api.claim("mt-held")
    assert (resume["run_id"], resume["kind"]) == (held["id"], "resume")


def test_a_bad_multitask_is_invalid_request_and_starts_nothing(api: Api) -> None:
    sid = api.session()
    bad_values: list[object] = ["sometimes", "", "Enqueue", 3, False, ["enqueue"], {}]
    for bad in bad_values:
        answer = api.http.post(
            "/v0/runs", json={"agent": "mt-bad", "session_id": sid, "multitask": bad}, headers=api.member
        )
        assert "multitask" in error_of(answer, 400, "invalid_request")["message"]
    assert api.http.get("/v0/runs", params={"session_id": sid}, headers=api.member).json()["runs"] == []
    assert api.start("mt-bad", session_id=sid, multitask=None)["status"] == "queued"  # null: the default


def test_an_idempotency_key_returns_the_first_run_whatever_multitask_says(api: Api) -> None:
    sid = api.session()
    first = api.start("mt-idem", session_id=sid)
    running = api.claim("mt-idem")
    body = {"agent": "mt-idem", "session_id": sid, "idempotency_key": "second-turn"}
    queued = api.http.post("/v0/runs", json={**body, "multitask": "enqueue"}, headers=api.member)
    again = api.http.post("/v0/runs", json={**body, "multitask": "interrupt"}, headers=api.member)
    assert (queued.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == queued.json()["id"] and again.json()["status"] == "queued"
    assert api.run(first["id"])["cancel_requested"] is False  # the repeat interrupted nothing
    api.end(running)
    assert api.claim("mt-idem")["run_id"] == queued.json()["id"]


def test_the_openapi_document_describes_multitask(api: Api) -> None:
    document = api.http.get("/openapi.json").json()
    schema = document["paths"]["/v0/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["multitask"]["enum"] == ["reject", "enqueue", "interrupt"]
