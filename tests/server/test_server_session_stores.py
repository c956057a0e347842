"""The session-store routes against a real server: answers, fencing, waiting, credentials, refusals."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import Api, bearer, error_of

from cliproc import run_cli
from keepstate.clock import now_ms
from serverproc import running_server

MIB = 1024 * 1024


class Sessions:
    """One space of the server's session stores, as one key sees it."""

    def __init__(self, api: Api, headers: dict[str, str], space: str | None = None) -> None:
        self.http = api.http
        self.headers = headers
        self.base = f"/v0/session-stores/{space or 'app-' + uuid.uuid4().hex[:8]}/sessions"

    def get(self, id: str) -> httpx.Response:
        return self.http.get(f"{self.base}/{id}", headers=self.headers)

    def put(self, id: str, **body: Any) -> httpx.Response:
        return self.http.put(f"{self.base}/{id}", json=body, headers=self.headers)

    def delete(self, id: str, fence: object = None) -> httpx.Response:
        params = {} if fence is None else {"fence": str(fence)}
        return self.http.delete(f"{self.base}/{id}", params=params, headers=self.headers)

    def post(self, id: str, tail: str, **body: Any) -> httpx.Response:
        return self.http.post(f"{self.base}/{id}/{tail}", json=body, headers=self.headers, timeout=60)

    def lease(self, id: str, ttl_ms: int = 30_000, wait_ms: int = 0) -> int:
        answer = self.post(id, "lease", ttl_ms=ttl_ms, wait_ms=wait_ms)
        assert answer.status_code == 200, answer.text
        fence: int = answer.json()["fence"]
        return fence


@pytest.fixture
def store(api: Api) -> Sessions:
    return Sessions(api, api.member)


def test_state_round_trips_with_versions_and_stays_readable_after_expiry(store: Sessions) -> None:
    state = {"history": [{"role": "user", "content": "two seats 🍽"}], "n": 1, "deep": {"a": [None, True, 1.5]}}
    assert store.put("s1", state=state).json() == {"version": 1}
    past = now_ms() - 60_000
    assert store.put("s1", state={**state, "n": 2}, expires_at=past).json() == {"version": 2}
    found = store.get("s1")
    assert found.status_code == 200
    assert found.json() == {"state": {**state, "n": 2}, "version": 2, "expires_at": past}  # expired, still there
    assert store.post("s1", "touch", expires_at=past + 1).status_code == 200
    assert store.get("s1").json()["expires_at"] == past + 1
    assert store.get("s1").json()["version"] == 2  # a touch is not a write of the state
    assert store.delete("s1").status_code == 204
    error_of(store.get("s1"), 404, "not_found")
    assert store.delete("s1").status_code == 204  # absent is fine
    assert store.post("s1", "touch", expires_at=past).status_code == 200  # and stays absent
    error_of(store.get("s1"), 404, "not_found")


def test_a_lease_fences_every_write_and_its_fence_only_grows(store: Sessions) -> None:
    first = store.lease("f", ttl_ms=60_000)
    error_of(store.post("f", "lease", ttl_ms=1000), 409, "session_locked")
    assert store.put("f", state={"by": "first"}, fence=first).status_code == 200
    renewed = store.post("f", "lease/renew", fence=first, ttl_ms=60_000)
    assert renewed.status_code == 200 and renewed.json()["expires_at"] > now_ms()
    assert store.post("f", "lease/release", fence=first).status_code == 204
    second = store.lease("f")
    assert second > first
    for stale in (
        store.put("f", state={"by": "stale"}, fence=first),
        store.post("f", "touch", expires_at=1, fence=first),
        store.delete("f", fence=first),
        store.post("f", "lease/renew", fence=first, ttl_ms=1000),
    ):
        error_of(stale, 409, "lease_lost")
    assert store.get("f").json() == {"state": {"by": "first"}, "version": 1, "expires_at": None}  # nothing written
    assert store.post("f", "lease/release", fence=first).status_code == 204  # a stale release changes nothing
    error_of(store.post("f", "lease", ttl_ms=1000), 409, "session_locked")
    assert store.put("f", state={"by": "second"}, fence=second).json() == {"version": 2}
    assert store.delete("f", fence=second).status_code == 204
    assert store.post("f", "lease/release", fence=second).status_code == 204
    assert store.lease("f") > second


def test_an_expired_lease_goes_to_the_next_asker(store: Sessions) -> None:
    first = store.lease("e", ttl_ms=200)
    second = store.lease("e", wait_ms=10_000)  # granted once the first one's 200 ms have passed
    assert second > first
    error_of(store.put("e", state={}, fence=first), 409, "lease_lost")
    error_of(store.post("e", "lease/renew", fence=first, ttl_ms=1000), 409, "lease_lost")


def test_a_crowd_waiting_on_one_session_each_gets_it_once(store: Sessions) -> None:
    """Twelve requests wait at once on a held session; each is granted in its turn, one at a time."""
    held = store.lease("crowd")

    def take_turn(n: int) -> tuple[int, int]:
        fence = store.lease("crowd", ttl_ms=30_000, wait_ms=30_000)
        seen = store.get("crowd")
        count = seen.json()["state"]["count"] if seen.status_code == 200 else 0
        assert store.put("crowd", state={"count": count + 1}, fence=fence).status_code == 200
        assert store.post("crowd", "lease/release", fence=fence).status_code == 204
        return fence, count

    with ThreadPoolExecutor(12) as pool:
        turns = [pool.submit(take_turn, n) for n in range(12)]
        assert store.post("crowd", "lease/release", fence=held).status_code == 204
        results = [turn.result(timeout=120) for turn in turns]
    assert sorted(count for _, count in results) == list(range(12))  # read-modify-write, never overlapping
    assert len({fence for fence, _ in results}) == 12 and min(fence for fence, _ in results) > held
    assert store.get("crowd").json()["state"] == {"count": 12}


def test_a_waiter_gives_up_with_session_locked_and_others_are_served_meanwhile(api: Api, store: Sessions) -> None:
    store.lease("w")
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(store.post, "w", "lease", ttl_ms=1000, wait_ms=1500)
        while not waiting.done():  # the server answers other calls while the lease request waits
            assert api.http.get("/healthz").status_code == 200
            assert store.put("other", state={"t": time.monotonic()}).status_code == 200
        error_of(waiting.result(), 409, "session_locked")


def test_keys_roles_and_environments(api: Api, server_env_key: str) -> None:
    space = f"app-{uuid.uuid4().hex[:8]}"
    member, admin = Sessions(api, api.member, space), Sessions(api, api.admin, space)
    assert member.put("shared", state={"by": "member"}).status_code == 200
    assert admin.get("shared").json()["state"] == {"by": "member"}  # one environment, one space
    other_env = Sessions(api, bearer(server_env_key), space)
    error_of(other_env.get("shared"), 404, "not_found")  # environments never see each other's
    assert other_env.put("shared", state={"by": "other"}).status_code == 200
    assert member.get("shared").json()["state"] == {"by": "member"}
    worker = Sessions(api, api.worker, space)
    error_of(worker.get("shared"), 403, "forbidden")
    error_of(worker.put("shared", state={}), 403, "forbidden")
    error_of(worker.post("shared", "lease", ttl_ms=1000), 403, "forbidden")
    nobody = Sessions(api, {}, space)
    error_of(nobody.get("shared"), 401, "unauthorized")
    answer = api.http.put(f"{nobody.base}/shared", content=b"{not json", headers={"content-type": "application/json"})
    error_of(answer, 401, "unauthorized")  # the credential is checked before the body is read
    error_of(Sessions(api, bearer("ks_wrong"), space).get("shared"), 401, "unauthorized")


@pytest.mark.parametrize(
    ("call", "status", "code"),
    [
        (lambda s: s.put("x", state=[1, 2]), 400, "invalid_request"),
        (lambda s: s.put("x"), 400, "invalid_request"),
        (lambda s: s.put("x", state={}, expires_at=-1), 400, "invalid_request"),
        (lambda s: s.put("x", state={}, expires_at="soon"), 400, "invalid_request"),
        (lambda s: s.put("x", state={}, fence=0), 400, "invalid_request"),
        (lambda s: s.put("x", state={}, fence=True), 400, "invalid_request"),
        (lambda s: s.put("x", state={"big": "x" * MIB}), 413, "too_large"),
        (lambda s: s.put("a b", state={}), 400, "invalid_key"),
        (lambda s: s.delete("x", fence="abc"), 400, "invalid_request"),
        (lambda s: s.post("x", "touch"), 400, "invalid_request"),
        (lambda s: s.post("x", "lease"), 400, "invalid_request"),
        (lambda s: s.post("x", "lease", ttl_ms=0), 400, "invalid_request"),
        (lambda s: s.post("x", "lease", ttl_ms=1000, wait_ms=-5), 400, "invalid_request"),
        (lambda s: s.post("x", "lease", ttl_ms=1.5), 400, "invalid_request"),
        (lambda s: s.post("x", "lease/renew", ttl_ms=1000), 400, "invalid_request"),
        (lambda s: s.post("x", "lease/release"), 400, "invalid_request"),
    ],
)
def test_bad_requests_are_refused_with_their_code(store: Sessions, call: Any, status: int, code: str) -> None:
    error_of(call(store), status, code)
    error_of(store.get("x"), 404, "not_found")  # nothing was written


def test_bad_json_and_bad_spaces(api: Api, store: Sessions) -> None:
    nan = api.http.put(
        f"{store.base}/x",
        content=b'{"state": {"n": NaN}}',
        headers={**store.headers, "content-type": "application/json"},
    )
    assert error_of(nan, 400, "invalid_value")["path"] == "$.state.n"
    error_of(Sessions(api, api.member, "a:b:c!").get("x"), 400, "invalid_key")
    error_of(api.http.get("/v0/session-stores/app/sessions/a%2Fb", headers=api.member), 404, "not_found")
    error_of(api.http.patch(f"{store.base}/x", json={}, headers=api.member), 405, "invalid_request")


def test_the_openapi_document_has_the_routes(api: Api) -> None:
    paths = api.http.get("/openapi.json").json()["paths"]
    base = "/v0/session-stores/{space}/sessions/{id}"
    assert set(paths[base]) >= {"get", "put", "delete"}
    for tail in ("/touch", "/lease", "/lease/renew", "/lease/release"):
        assert "post" in paths[base + tail]


def test_expired_sessions_go_a_day_later_by_the_sweep_and_by_purge(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'purge.db'}"
    member = bearer(run_cli("keys", "create", "--role", "member", "--store", store).stdout.strip())
    now, day = now_ms(), 86_400_000
    base = "/v0/session-stores/app/sessions"
    with running_server(store) as server, httpx.Client(base_url=server.url, headers=member) as http:
        for id, expires_at in (("old", now - 3 * day), ("recent", now - 3_600_000), ("later", now + day)):
            assert http.put(f"{base}/{id}", json={"state": {}, "expires_at": expires_at}).status_code == 200
    dry = run_cli("purge", "--store", store, "--older-than", "30", "--dry-run")
    assert "would purge 1 session-store record(s) expired more than 1 day(s) ago" in dry.stdout, dry.stderr
    with running_server(store) as server, httpx.Client(base_url=server.url, headers=member) as http:
        deadline = time.monotonic() + 60  # the first sweep runs a second after the start
        while http.get(f"{base}/old").status_code == 200:
            assert time.monotonic() < deadline, "the server's sweep never purged the expired session"
            time.sleep(0.1)
        assert [http.get(f"{base}/{id}").status_code for id in ("old", "recent", "later")] == [404, 200, 200]
        assert http.put(f"{base}/older", json={"state": {}, "expires_at": now - 2 * day}).status_code == 200
        purged = run_cli("purge", "--store", store, "--older-than", "30", "--session-grace", "0.5")
        assert "purged 1 session-store record(s) expired more than 0.5 day(s) ago" in purged.stdout, purged.stderr
        assert [http.get(f"{base}/{id}").status_code for id in ("older", "recent")] == [404, 200]
        metrics = http.get("/metrics").text
        assert "keepstate_sweep_sessions_purged_total" in metrics
