"""Run events through a real ``keepstate serve``, on SQLite and on PostgreSQL: a worker's emit, a caller's
pages, and the Server-Sent Events stream (resume with ``Last-Event-ID``, keep-alive comments, the end after
a final status, a held run's stream open through its resume).

The servers run with a keep-alive of a fraction of a second (``KEEPSTATE_EVENTS_KEEPALIVE``), so the
comments are seen without waiting 15 s; no test measures time. Streams of two servers sharing a store are
``test_server_events_servers.py``'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_helpers import Api, error_of, token
from sse import Stream

from backends import declaring, fresh_url
from serverproc import ServerInfo, running_server, stop

KEEPALIVE = {"KEEPSTATE_EVENTS_KEEPALIVE": "0.3"}


@pytest.fixture(scope="module", params=declaring("platform", "shared"))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """This module's server (the suite's ``api`` fixture takes it): on each store servers share."""
    folder: Path = tmp_path_factory.mktemp("events")
    with fresh_url(request.param, folder) as url, running_server(url, extra_env=KEEPALIVE) as info:
        yield info


def emit(api: Api, inv: dict[str, Any], *events: dict[str, Any]) -> Any:
    return api.http.post(
        f"/v0/invocations/{inv['id']}/events", json={"events": list(events)}, headers=token(inv["token"])
    )


def page(api: Api, run_id: str, **params: Any) -> dict[str, Any]:
    answer = api.http.get(f"/v0/runs/{run_id}/events", params=params, headers=api.member)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def stream(api: Api, run_id: str, headers: dict[str, str] | None = None, **params: Any) -> Stream:
    return Stream(api.url, f"/v0/runs/{run_id}/events", {**api.member, **(headers or {})}, params)


def running(api: Api, agent: str, **body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    run = api.start(agent, **body)
    inv = api.claim(agent)
    assert inv["run_id"] == run["id"]
    return run, inv


def statuses(events: list[Any]) -> list[str]:
    return [event["data"]["status"] for event in events if event["type"] == "run.status"]


# ---------------------------------------------------------------- emit and pages


def test_a_worker_emits_and_its_caller_reads_the_log_a_page_at_a_time(api: Api) -> None:
    run, inv = running(api, "ev-page")
    answer = emit(api, inv, {"data": "hello"}, {"type": "tool.call", "data": {"name": "search", "n": [1, 2]}})
    assert answer.status_code == 200 and answer.json() == {"seq": 4, "cancel_requested": False}
    first = page(api, run["id"])
    assert [(e["seq"], e["type"], e["data"]) for e in first["events"]] == [
        (1, "run.status", {"status": "queued"}),
        (2, "run.status", {"status": "running"}),
        (3, "message", "hello"),
        (4, "tool.call", {"name": "search", "n": [1, 2]}),
    ]
    assert all(isinstance(e["at"], int) for e in first["events"]) and first["next"] == 4
    assert page(api, run["id"], after=2, limit=1) == {"events": [first["events"][2]], "next": 3}
    assert page(api, run["id"], after=4) == {"events": [], "next": 4}  # nothing yet, more may come
    api.http.post(f"/v0/runs/{run['id']}/cancel", headers=api.member)
    assert emit(api, inv, {"data": 1}).json() == {"seq": 5, "cancel_requested": True}
    assert api.end(inv, output={"answer": 42}).status_code == 200
    last = page(api, run["id"], after=5)
    assert [(e["type"], e["data"]) for e in last["events"]] == [
        ("run.output", {"output": {"answer": 42}}),
        ("run.status", {"status": "done"}),
    ]
    assert last["next"] is None  # the log is over
    assert page(api, run["id"], after=7) == {"events": [], "next": None}


@pytest.mark.parametrize(
    "event, code",
    [
        ({"type": "", "data": 1}, "invalid_request"),
        ({"type": "Tool", "data": 1}, "invalid_request"),
        ({"type": "a b", "data": 1}, "invalid_request"),
        ({"type": "x" * 65, "data": 1}, "invalid_request"),
        ({"type": 7, "data": 1}, "invalid_request"),
        ({"type": "run.status", "data": {"status": "done"}}, "invalid_request"),
        ({"type": "run.mine", "data": 1}, "invalid_request"),
        ({"type": "message"}, "invalid_request"),
        ({"data": 1, "payload": 2}, "invalid_request"),
        ("not an object", "invalid_request"),
        ({"data": "x" * (64 * 1024)}, "too_large"),
    ],
)
def test_a_bad_event_refuses_the_whole_emit(api: Api, event: Any, code: str) -> None:
    run, inv = running(api, "ev-bad")
    answer = emit(api, inv, {"data": "fine"}, event)
    error_of(answer, 413 if code == "too_large" else 400, code)
    assert len(page(api, run["id"])["events"]) == 2  # queued, running: nothing of the call
    assert emit(api, inv, {"type": "a.b_c-9", "data": "x" * (64 * 1024 - 2)}).status_code == 200  # the limits


def test_an_emit_holds_one_to_a_hundred_events(api: Api) -> None:
    run, inv = running(api, "ev-count")
    bodies: list[dict[str, Any]] = [{}, {"events": []}, {"events": {"data": 1}}]
    for body in bodies:
        error_of(
            api.http.post(f"/v0/invocations/{inv['id']}/events", json=body, headers=token(inv["token"])),
            400,
            "invalid_request",
        )
    error_of(emit(api, inv, *({"data": n} for n in range(101))), 413, "too_large")
    assert emit(api, inv, *({"data": n} for n in range(100))).json()["seq"] == 102
    assert len(page(api, run["id"], limit=1000)["events"]) == 102


def test_the_log_takes_ten_thousand_events_and_then_refuses_an_emit_whole(api: Api) -> None:
    run, inv = running(api, "ev-cap")  # queued, running
    for _ in range(99):
        assert emit(api, inv, *({"data": 0} for _ in range(100))).status_code == 200
    assert emit(api, inv, *({"data": 1} for _ in range(97))).json()["seq"] == 9_999
    error_of(emit(api, inv, {"data": 2}, {"data": 2}), 413, "too_large")
    assert emit(api, inv, {"data": 3}).json()["seq"] == 10_000
    error_of(emit(api, inv, {"data": 4}), 413, "too_large")
    assert api.end(inv, output=None).status_code == 200  # the platform's own events are never refused
    tail = page(api, run["id"], after=9_998)
    assert [(e["seq"], e["type"]) for e in tail["events"]] == [
        (9_999, "message"),
        (10_000, "message"),
        (10_001, "run.output"),
        (10_002, "run.status"),
    ]


def test_only_the_running_invocations_token_emits(api: Api) -> None:
    run, inv = running(api, "ev-token")
    other_run, other = running(api, "ev-token")
    wrong = api.http.post(
        f"/v0/invocations/{inv['id']}/events", json={"events": [{"data": 1}]}, headers=token(other["token"])
    )
    error_of(wrong, 401, "unauthorized")
    error_of(api.http.post(f"/v0/invocations/{inv['id']}/events", json={"events": [{"data": 1}]}), 401, "unauthorized")
    assert api.end(inv, kind="hold", request={"q": 1}).status_code == 200
    error_of(emit(api, inv, {"data": "late"}), 401, "unauthorized")
    assert statuses(page(api, run["id"])["events"]) == ["queued", "running", "held"]
    assert len(page(api, other_run["id"])["events"]) == 2


def test_a_runs_events_are_its_owners_and_the_admins(api: Api) -> None:
    run, _ = running(api, "ev-who")
    path = f"/v0/runs/{run['id']}/events"
    assert api.http.get(path, headers=api.admin).status_code == 200
    error_of(api.http.get(path, headers={"Authorization": f"Bearer {api.new_key('member')}"}), 404, "not_found")
    error_of(api.http.get(path, headers=api.worker), 403, "forbidden")
    error_of(api.http.get(path), 401, "unauthorized")
    error_of(api.http.get("/v0/runs/run_none/events", headers=api.member), 404, "not_found")
    error_of(api.http.get(path, params={"after": "-1"}, headers=api.member), 400, "invalid_request")
    with stream(api, "run_none") as none:
        assert none.status == 404
    with stream(api, run["id"], {"Last-Event-ID": "three"}) as bad:
        assert bad.status == 400


# ---------------------------------------------------------------- streams


def test_a_stream_follows_a_run_through_hold_and_resume_to_its_end(api: Api) -> None:
    run = api.start("ev-stream")
    with stream(api, run["id"]) as events:
        assert events.status == 200 and events.headers is not None
        assert events.headers["content-type"].startswith("text/event-stream")
        assert events.headers["cache-control"] == "no-cache"
        assert [(m.id, m.event) for m in events.events(1)] == [(1, "run.status")]
        inv = api.claim("ev-stream")
        emit(api, inv, {"data": "thinking"})
        api.end(inv, kind="hold", request={"ask": "ok?"})
        assert [m.data["data"] for m in events.events(3)] == [{"status": "running"}, "thinking", {"status": "held"}]
        decided = api.http.post(f"/v0/runs/{run['id']}/decision", json={"approved": True}, headers=api.member)
        assert decided.status_code == 200
        resumed = api.claim("ev-stream")
        emit(api, resumed, {"type": "token", "data": "ok"})
        api.end(resumed, output="fine")
        rest = events.rest()  # the stream ends by itself after done
    assert [(m.id, m.event, m.data["data"]) for m in rest] == [
        (5, "run.status", {"status": "queued"}),
        (6, "run.status", {"status": "running"}),
        (7, "token", "ok"),
        (8, "run.output", {"output": "fine"}),
        (9, "run.status", {"status": "done"}),
    ]
    assert all(m.data["seq"] == m.id and m.data["type"] == m.event for m in rest)
    assert [m.data for m in rest] == page(api, run["id"], after=4)["events"]


def test_a_stream_goes_on_after_its_last_event_id_and_after_the_after_parameter(api: Api) -> None:
    run, inv = running(api, "ev-resume")
    emit(api, inv, *({"data": n} for n in range(3)))  # seqs 3, 4, 5
    with stream(api, run["id"]) as first:
        assert [m.id for m in first.events(4)] == [1, 2, 3, 4]
    emit(api, inv, *({"data": n} for n in range(3, 6)))  # 6, 7, 8, written while nobody streams
    with stream(api, run["id"], {"Last-Event-ID": "4"}, after=1) as again:  # the header wins
        got = again.events(4)
        assert [m.id for m in got] == [5, 6, 7, 8]
        assert [m.data["data"] for m in got] == [2, 3, 4, 5]
        api.end(inv, kind="fail", error={"type": "E", "message": "no"})
        assert [(m.id, m.data["data"]) for m in again.rest()] == [(9, {"status": "failed"})]
    with stream(api, run["id"], after=7) as late:
        assert [m.id for m in late.rest()] == [8, 9]
    with stream(api, run["id"], {"Last-Event-ID": "9"}) as over:
        assert over.rest() == []


def test_an_idle_stream_sends_keepalive_comments_and_still_gets_what_comes(api: Api) -> None:
    run, inv = running(api, "ev-idle")
    with stream(api, run["id"], after=2) as events:
        first = events.next()
        assert first is not None and first.comment == "keep-alive"
        emit(api, inv, {"data": "late"})
        message = events.next()
        while message is not None and message.comment is not None:
            message = events.next()
        assert message is not None and (message.id, message.data["data"]) == (3, "late")
        comment = events.next()
        assert comment is not None and comment.comment == "keep-alive"
        api.end(inv, output=None)
        assert [m.id for m in events.rest()] == [4, 5]


def test_every_final_status_ends_its_stream(api: Api) -> None:
    cancelled = api.start("ev-end-cancel")
    expired = api.start("ev-end-expire", queue_timeout=1)
    with stream(api, cancelled["id"]) as events, stream(api, expired["id"]) as expiring:
        api.http.post(f"/v0/runs/{cancelled['id']}/cancel", headers=api.member)
        assert statuses([m.data for m in events.rest()]) == ["queued", "cancelled"]
        assert statuses([m.data for m in expiring.rest()]) == ["queued", "expired"]  # by the server's sweep
    worker = api.http.post("/v0/keys", json={"role": "worker"}, headers=api.admin).json()
    interrupted = api.start("ev-end-revoked")
    claimed = api.http.post(
        "/v0/invocations/claim",
        json={"agents": ["ev-end-revoked"]},
        headers={"Authorization": f"Bearer {worker['key']}"},
    ).json()
    with stream(api, interrupted["id"], after=2) as events:
        assert api.http.delete(f"/v0/keys/{worker['id']}", headers=api.admin).status_code == 204
        assert statuses([m.data for m in events.rest()]) == ["interrupted"]  # never resumed: the log is over
    error_of(emit(api, claimed, {"data": 1}), 401, "unauthorized")


def test_deleting_a_held_runs_session_ends_its_stream(api: Api) -> None:
    session_id = api.session()
    run, inv = running(api, "ev-session", session_id=session_id)
    api.end(inv, kind="hold", request=None)
    with stream(api, run["id"], after=3) as events:
        assert api.http.delete(f"/v0/sessions/{session_id}", headers=api.member).status_code == 204
        assert events.rest() == []  # its cancel went with the session's events
    assert page(api, run["id"]) == {"events": [], "next": None}
    assert api.run(run["id"])["status"] == "cancelled"


def test_a_stopping_server_ends_its_streams_instead_of_waiting_out_its_grace(tmp_path: Path) -> None:
    with running_server(f"sqlite:///{tmp_path / 'stop.db'}") as info:
        client = Api(info)
        try:
            run, _ = running(client, "ev-stop")
            with stream(client, run["id"], after=2) as events:
                stop(info.process)
                assert events.rest() == []  # ended by the server, not by a hang-up
        finally:
            client.close()
        log = info.log()
    assert "keepstate: stopped, store closed" in log  # its shutdown ran whole
    assert "graceful shutdown exceeded" not in log and "Traceback" not in log


def open_streams(api: Api) -> float:
    text = api.http.get("/metrics").text
    return next(float(line.split()[1]) for line in text.splitlines() if line.startswith("keepstate_event_streams "))


def until(condition: Any) -> None:
    """Until ``condition()`` holds; the deadline only catches a hang."""
    give_up = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < give_up, "never happened"
        time.sleep(0.05)


def test_a_client_that_hangs_up_frees_its_stream(api: Api) -> None:
    run, _ = running(api, "ev-hangup")
    until(lambda: open_streams(api) == 0)  # other tests' streams, gone
    events = stream(api, run["id"], after=2)
    until(lambda: open_streams(api) == 1)
    events.close()
    until(lambda: open_streams(api) == 0)


def test_a_revoked_key_ends_its_stream_before_anything_more_is_sent(api: Api) -> None:
    member = api.http.post("/v0/keys", json={"role": "member"}, headers=api.admin).json()
    watched = api.start("ev-revoke-watched", headers={"Authorization": f"Bearer {member['key']}"})
    watched_inv = api.claim("ev-revoke-watched")
    with Stream(api.url, f"/v0/runs/{watched['id']}/events", {"Authorization": f"Bearer {member['key']}"}) as events:
        assert [m.id for m in events.events(2)] == [1, 2]
        assert api.http.delete(f"/v0/keys/{member['id']}", headers=api.admin).status_code == 204
        emit(api, watched_inv, {"data": "not for a revoked key"})
        assert events.rest() == []
