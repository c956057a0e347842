"""Concurrency over real HTTP: one turn per session, exclusive claims, exact compare-and-set counts.

Threads drive a real server; the claim test also runs two server processes sharing one SQLite
file, so exclusivity is proven across processes, not only inside one event loop.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from server_helpers import Api, bearer, token

from serverproc import running_server


def test_many_threads_starting_turns_in_one_session_exactly_one_wins(api: Api) -> None:
    session_id = api.session()
    barrier = threading.Barrier(16)

    def start(_: int) -> int:
        with httpx.Client(base_url=api.url, timeout=30) as client:
            barrier.wait()
            return client.post(
                "/v0/runs", json={"agent": "race", "session_id": session_id}, headers=api.member
            ).status_code

    with ThreadPoolExecutor(16) as pool:
        statuses = Counter(pool.map(start, range(16)))
    assert statuses == {202: 1, 409: 15}


def _drain(url: str, worker: dict[str, str], agent: str, out: list[str]) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        while True:
            answer = client.post("/v0/invocations/claim", json={"agents": [agent], "wait": 0.3}, headers=worker)
            if answer.status_code == 204:
                return
            inv = answer.json()
            out.append(inv["run_id"])
            done = client.post(f"/v0/invocations/{inv['id']}/complete", json={"output": 1}, headers=token(inv["token"]))
            assert done.status_code == 200


def test_claims_are_exclusive_across_two_server_processes(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    with running_server(store) as one, running_server(store, admin_key=one.admin_key) as two:
        api = Api(one)
        run_ids = {api.start("job")["id"] for _ in range(60)}
        claimed: list[list[str]] = [[] for _ in range(8)]
        threads = [
            threading.Thread(target=_drain, args=((one, two)[i % 2].url, api.worker, "job", claimed[i]))
            for i in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        every = [run_id for part in claimed for run_id in part]
        assert sorted(every) == sorted(run_ids)  # each run exactly once
        assert sum(1 for part in claimed if part) >= 2
        statuses = {api.run(run_id)["status"] for run_id in run_ids}
        assert statuses == {"done"}
        api.close()


def test_compare_and_set_loops_over_http_count_exactly(api: Api) -> None:
    api.start("counter")
    headers = token(api.claim("counter")["token"])

    def add(times: int) -> int:
        conflicts = 0
        with httpx.Client(base_url=api.url, timeout=30) as client:
            for _ in range(times):
                while True:
                    got = client.get("/v0/state/agent/n", headers=headers)
                    value, version = (got.json()["value"], got.json()["version"]) if got.status_code == 200 else (0, 0)
                    put = client.put(
                        "/v0/state/agent/n", json={"value": value + 1, "if_version": version}, headers=headers
                    )
                    if put.status_code == 200:
                        break
                    assert put.json()["error"] == "version_conflict"
                    conflicts += 1
        return conflicts

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(add, [20] * 6))
    final = api.http.get("/v0/state/agent/n", headers=headers).json()
    assert final == {"value": 120, "version": 120}


def test_concurrent_appends_lose_nothing(api: Api) -> None:
    session_id = api.session()
    api.start("log", session_id=session_id)
    headers = token(api.claim("log")["token"])

    def append(worker: int) -> None:
        with httpx.Client(base_url=api.url, timeout=30) as client:
            for i in range(25):
                answer = client.post("/v0/state/session/log/append", json={"items": [[worker, i]]}, headers=headers)
                assert answer.status_code == 200

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(append, range(6)))
    final = api.http.get("/v0/state/session/log", headers=headers).json()
    assert final["version"] == 150 and len(final["value"]) == 150
    for worker in range(6):  # each writer's items stay in its order
        assert [i for w, i in final["value"] if w == worker] == list(range(25))


def test_claim_wait_wakes_when_a_run_is_queued(api: Api) -> None:
    got: list[httpx.Response] = []

    def wait_claim() -> None:
        with httpx.Client(base_url=api.url, timeout=30) as client:
            got.append(client.post("/v0/invocations/claim", json={"agents": ["late"], "wait": 10}, headers=api.worker))

    thread = threading.Thread(target=wait_claim)
    thread.start()
    run = api.start("late")
    thread.join(timeout=10)
    assert got and got[0].status_code == 200 and got[0].json()["run_id"] == run["id"]


def test_environments_do_not_share_claims(api: Api, server_env_key: str) -> None:
    other = bearer(server_env_key)
    api.start("envjob")
    answer = api.http.post("/v0/invocations/claim", json={"agents": ["envjob"]}, headers=other)
    assert answer.status_code == 204
