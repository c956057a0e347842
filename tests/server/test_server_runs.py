"""Sessions, runs and invocations end to end over HTTP against a real ``keepstate serve``."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from server_helpers import Api, bearer, token

HANG_S = 60
"""Bounds a wait for something that must happen, so a broken promise fails instead of hanging."""


def test_turn_flow_with_state_hold_and_resume(api: Api) -> None:
    session_id = api.session(user="cust-1")
    run = api.start("chat", input={"message": "hi"}, session_id=session_id)
    assert (run["status"], run["user"], run["session_id"]) == ("queued", "cust-1", session_id)
    inv = api.claim("chat")
    assert (inv["run_id"], inv["kind"], inv["input"], inv["user"]) == (run["id"], "start", {"message": "hi"}, "cust-1")
    headers = token(inv["token"])
    put = api.http.put("/v0/state/run/progress", json={"value": {"step": 1}}, headers=headers)
    assert put.json() == {"version": 1}
    assert api.end(inv, "hold", request={"question": "ok?"}).status_code == 200
    held = api.run(run["id"])
    assert (held["status"], held["hold"]) == ("held", {"question": "ok?"})
    decided = api.http.post(
        f"/v0/runs/{run['id']}/decision", json={"approved": True, "data": {"n": 1}}, headers=api.member
    )
    assert decided.json()["status"] == "queued"
    resume = api.claim("chat")
    assert (resume["kind"], resume["decision"]["approved"], resume["decision"]["data"]) == ("resume", True, {"n": 1})
    got = api.http.get("/v0/state/run/progress", headers=token(resume["token"]))
    assert got.json() == {"value": {"step": 1}, "version": 1}
    assert api.end(resume, output={"done": True}).status_code == 200
    final = api.run(run["id"], wait=5)
    assert (final["status"], final["output"]) == ("done", {"done": True})


def test_a_decision_records_who_made_it_and_when(api: Api) -> None:
    """``decision.by`` is the deciding key's name (its id when it has none), ``decision.at`` the server's
    time of the decision, in the run the API answers with and in the resume's claim."""
    for name in ("ops-alice", None):
        made = api.http.post("/v0/keys", json={"role": "member", "name": name}, headers=api.admin).json()
        person = bearer(made["key"])
        run = api.start("chat", session_id=api.session(headers=person), headers=person)
        api.end(api.claim("chat"), "hold", request={"question": "ok?"})
        before = int(time.time() * 1000)
        decided = api.http.post(f"/v0/runs/{run['id']}/decision", json={"approved": False}, headers=person).json()
        after = int(time.time() * 1000)
        decision = decided["decision"]
        assert (decision["approved"], decision["data"], decision["by"]) == (False, None, name or made["id"])
        assert before <= decision["at"] <= after
        assert api.run(run["id"], headers=person)["decision"] == decision
        assert api.claim("chat")["decision"] == decision


def test_held_turn_does_not_block_and_its_resume_runs_beside_a_newer_turn(api: Api) -> None:
    session_id = api.session()
    first = api.start("chat", session_id=session_id)
    inv = api.claim("chat")
    api.end(inv, "hold", request=None)
    second = api.start("chat", session_id=session_id)  # held does not block
    second_inv = api.claim("chat")
    assert second_inv["run_id"] == second["id"]
    decided = api.http.post(f"/v0/runs/{first['id']}/decision", json={"approved": False}, headers=api.member)
    assert decided.status_code == 200  # a resume is never refused, even while a newer turn runs
    resume = api.claim("chat")
    assert resume["run_id"] == first["id"]
    for a_inv in (second_inv, resume):
        grown = api.http.post(
            "/v0/state/session/history/append", json={"items": [a_inv["run_id"]]}, headers=token(a_inv["token"])
        )
        assert grown.status_code == 200
    assert grown.json()["length"] == 2
    busy = api.http.post("/v0/runs", json={"agent": "chat", "session_id": session_id}, headers=api.member)
    assert busy.status_code == 409 and busy.json()["error"] == "session_busy"


def test_token_dies_after_complete_fail_and_hold(api: Api) -> None:
    for kind, body in (
        ("complete", {"output": 1}),
        ("fail", {"error": {"type": "E", "message": "m"}}),
        ("hold", {"request": 2}),
    ):
        api.start("die")
        inv = api.claim("die")
        headers = token(inv["token"])
        assert api.http.get("/v0/state/agent/x", headers=headers).status_code == 404
        assert api.end(inv, kind, **body).status_code == 200
        for answer in (
            api.http.get("/v0/state/agent/x", headers=headers),
            api.http.post(f"/v0/invocations/{inv['id']}/heartbeat", headers=headers),
            api.end(inv, "complete"),
        ):
            assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"
    runs = api.http.get("/v0/runs", headers=api.member).json()["runs"]
    assert [r["status"] for r in runs if r["agent"] == "die"] == ["done", "failed", "held"]
    assert runs[1]["error"] == {"type": "E", "message": "m"}


def _status_once_changed(api: Api, run_id: str, status: str) -> str:
    """The run's status once it is no longer ``status``; the deadline only bounds a hang."""
    deadline = time.monotonic() + HANG_S
    while (now := str(api.run(run_id, wait=1)["status"])) == status:
        assert time.monotonic() < deadline, f"the run stayed {status} for {HANG_S} s"
    return now


def test_lease_expiry_interrupts_the_run_and_kills_the_token(lease_api: Api) -> None:
    """Heartbeats keep the invocation alive past its first lease (a beat every tenth of it), then
    without them the sweep interrupts it. The lease is short (1 to 2 s), so a loaded machine may stall
    longer than it between two beats: a beat may then be refused, and only then (its lease had ended)."""
    api = lease_api
    run = api.start("slow")
    last_sent = time.monotonic()  # the lease the claim grants ends after this plus a lease
    inv = api.claim("slow")
    lease = inv["lease_seconds"]
    first_end, beats_past_it = time.monotonic() + lease, 0
    while beats_past_it < 2:  # heartbeats keep it alive past its first lease
        sent = time.monotonic()
        beat = api.http.post(f"/v0/invocations/{inv['id']}/heartbeat", headers=token(inv["token"]))
        if beat.status_code == 401:  # refused: only when more than a lease passed since the last grant
            assert time.monotonic() - last_sent > lease - 0.01, "a beat within the lease was refused"
            break
        assert beat.json() == {"lease_seconds": lease, "cancel_requested": False}
        beats_past_it += time.monotonic() > first_end
        last_sent = sent
        time.sleep(lease / 10)
    assert _status_once_changed(api, run["id"], "running") == "interrupted"  # no beat: the sweep ends it
    dead = api.http.get("/v0/state/run/x", headers=token(inv["token"]))
    assert dead.status_code == 401
    assert api.end(inv, "complete").status_code == 401
    nothing = api.http.post("/v0/invocations/claim", json={"agents": ["slow"]}, headers=api.worker)
    assert nothing.status_code == 204  # never replayed by itself


def test_cancel_queued_held_and_running(api: Api) -> None:
    queued = api.start("cancel-me")
    answer = api.http.post(f"/v0/runs/{queued['id']}/cancel", headers=api.member)
    assert answer.json()["status"] == "cancelled"
    assert api.http.post("/v0/invocations/claim", json={"agents": ["cancel-me"]}, headers=api.worker).status_code == 204
    running = api.start("cancel-me")
    inv = api.claim("cancel-me")
    answer = api.http.post(f"/v0/runs/{running['id']}/cancel", headers=api.member)
    assert (answer.json()["status"], answer.json()["cancel_requested"]) == ("running", True)
    beat = api.http.post(f"/v0/invocations/{inv['id']}/heartbeat", headers=token(inv["token"]))
    assert beat.json()["cancel_requested"] is True
    api.end(inv, "fail", error={"type": "Cancelled", "message": "stopped"})
    assert api.run(running["id"])["status"] == "cancelled"
    held = api.start("cancel-me")
    api.end(api.claim("cancel-me"), "hold")
    assert api.http.post(f"/v0/runs/{held['id']}/cancel", headers=api.member).json()["status"] == "cancelled"


def test_child_run_takes_parent_and_user(api: Api) -> None:
    session_id = api.session(user="cust-9")
    parent = api.start("boss", session_id=session_id)
    inv = api.claim("boss")
    child = api.http.post("/v0/runs", json={"agent": "helper", "input": 3}, headers=token(inv["token"]))
    assert child.status_code == 202
    body = child.json()
    assert (body["parent_id"], body["user"], body["session_id"]) == (parent["id"], "cust-9", None)
    assert api.run(body["id"])["parent_id"] == parent["id"]  # the parent's owner sees the child
    helper = api.claim("helper")
    assert (helper["parent_id"], helper["user"]) == (parent["id"], "cust-9")
    no_session = api.http.get("/v0/state/session/k", headers=token(helper["token"]))
    assert no_session.status_code == 409 and no_session.json()["error"] == "no_session"


def test_idempotency_key_returns_the_first_run(api: Api) -> None:
    first = api.http.post("/v0/runs", json={"agent": "idem", "idempotency_key": "order-1"}, headers=api.member)
    again = api.http.post("/v0/runs", json={"agent": "idem", "idempotency_key": "order-1"}, headers=api.member)
    assert (first.status_code, again.status_code) == (202, 200)
    assert first.json()["id"] == again.json()["id"]
    other = api.http.post(
        "/v0/runs", json={"agent": "idem", "idempotency_key": "order-1"}, headers=bearer(api.new_key("member"))
    )
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]


def test_visibility_between_members_admins_and_environments(api: Api, server_env_key: str) -> None:
    session_id = api.session()
    run = api.start("see", session_id=session_id)
    stranger = bearer(api.new_key("member"))
    for path in (f"/v0/sessions/{session_id}", f"/v0/runs/{run['id']}"):
        assert api.http.get(path, headers=stranger).status_code == 404
        assert api.http.get(path, headers=api.admin).status_code == 200
        assert api.http.get(path, headers=bearer(server_env_key)).status_code == 404
    assert api.http.get("/v0/runs", headers=stranger).json()["runs"] == []
    assert run["id"] in [r["id"] for r in api.http.get("/v0/runs?limit=1000", headers=api.admin).json()["runs"]]
    assert api.http.post(f"/v0/runs/{run['id']}/cancel", headers=stranger).status_code == 404
    same_id = api.http.post("/v0/sessions", json={"id": session_id}, headers=api.member)
    assert same_id.status_code == 200 and same_id.json()["id"] == session_id


def test_session_delete_drops_session_state_and_is_refused_while_busy(api: Api) -> None:
    session_id = api.session()
    api.start("notes", session_id=session_id)
    inv = api.claim("notes")
    api.http.put("/v0/state/session/n", json={"value": 1}, headers=token(inv["token"]))
    api.http.put("/v0/state/agent/keep", json={"value": 1}, headers=token(inv["token"]))
    busy = api.http.delete(f"/v0/sessions/{session_id}", headers=api.member)
    assert busy.status_code == 409 and busy.json()["error"] == "session_busy"
    api.end(inv)
    assert api.http.delete(f"/v0/sessions/{session_id}", headers=api.member).status_code == 204
    assert api.http.get(f"/v0/sessions/{session_id}", headers=api.member).status_code == 404
    api.session(id=session_id)
    api.start("notes", session_id=session_id)
    again = api.claim("notes")
    gone = api.http.get("/v0/state/session/n", headers=token(again["token"]))
    assert gone.status_code == 404
    kept = api.http.get("/v0/state/agent/keep", headers=token(again["token"]))
    assert kept.status_code == 200


def test_keys_list_and_revoke(api: Api) -> None:
    created = api.http.post("/v0/keys", json={"role": "member", "name": "temp"}, headers=api.admin).json()
    listed = api.http.get("/v0/keys", headers=api.admin).json()["keys"]
    mine = [k for k in listed if k["id"] == created["id"]]
    assert mine and set(mine[0]) == {"id", "role", "name", "created_at"}
    assert api.http.get("/v0/sessions", headers=bearer(created["key"])).status_code == 200
    assert api.http.delete(f"/v0/keys/{created['id']}", headers=api.admin).status_code == 204
    assert api.http.get("/v0/sessions", headers=bearer(created["key"])).status_code == 401


def test_lists_page_with_next(api: Api) -> None:
    member = bearer(api.new_key("member"))
    ids = [api.session(member, user="pager") for _ in range(5)]
    seen: list[str] = []
    after = ""
    while True:
        page = api.http.get("/v0/sessions", params={"limit": 2, "after": after, "user": "pager"}, headers=member).json()
        seen += [s["id"] for s in page["sessions"]]
        if page["next"] is None:
            break
        after = page["next"]
    assert seen == ids


def test_run_wait_returns_when_the_run_ends(api: Api) -> None:
    run = api.start("waiter")
    assert api.run(run["id"], wait=0.3)["status"] == "queued"  # nobody claims it: the wait ends queued
    with ThreadPoolExecutor(1) as pool:  # a long wait returns with the run's end, however long that takes
        waiting = pool.submit(
            httpx.get,
            f"{api.url}/v0/runs/{run['id']}",
            params={"wait": HANG_S},
            headers=api.member,
            timeout=HANG_S + 30,
        )
        assert api.end(api.claim("waiter"), "complete", output="over").status_code == 200
        ended = waiting.result(HANG_S + 30).json()
    assert (ended["status"], ended["output"]) == ("done", "over")
