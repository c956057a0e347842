"""A keepstate server loses its PostgreSQL: every call is a 503 with Retry-After, never a 500
or a hang, and the same server process serves again by itself once PostgreSQL is back. Its waits are
hang guards (HANG_S), never speeds: a call that fails within 5 s idle can take far longer on a loaded machine."""

from __future__ import annotations

import time

import httpx
import pytest

from private_services import PrivatePostgres, private_pg
from serverproc import running_server

__all__ = ["private_pg"]  # a fixture, used by name
HANG_S = 60.0
pytestmark = pytest.mark.timeout(240)


def _calls(http: httpx.Client, admin: dict[str, str], run_token: dict[str, str], run_id: str) -> dict[str, object]:
    return {
        "state get": lambda: http.get("/v0/state/session/k", headers=run_token),
        "state put": lambda: http.put("/v0/state/session/k", json={"value": 2, "if_version": 1}, headers=run_token),
        "state append": lambda: http.post("/v0/state/session/log/append", json={"items": [1]}, headers=run_token),
        "session create": lambda: http.post("/v0/sessions", json={}, headers=admin),
        "run get": lambda: http.get(f"/v0/runs/{run_id}", headers=admin),
        "run start": lambda: http.post("/v0/runs", json={"agent": "other"}, headers=admin),
        "claim": lambda: http.post("/v0/invocations/claim", json={"agents": ["x"]}, headers=admin),
        "keys": lambda: http.get("/v0/keys", headers=admin),
    }


def test_server_answers_503_while_postgres_is_down_and_recovers(private_pg: PrivatePostgres) -> None:
    with running_server(private_pg.url, lease=3600) as info, httpx.Client(base_url=info.url, timeout=HANG_S) as http:
        admin = {"Authorization": f"Bearer {info.admin_key}"}
        http.post("/v0/sessions", json={"id": "s1"}, headers=admin).raise_for_status()
        run_id = http.post("/v0/runs", json={"agent": "a", "session_id": "s1"}, headers=admin).json()["id"]
        token = {
            "x-agentos-run-token": http.post("/v0/invocations/claim", json={"agents": ["a"]}, headers=admin).json()[
                "token"
            ]
        }
        assert http.put("/v0/state/session/k", json={"value": 1}, headers=token).json() == {"version": 1}
        calls = _calls(http, admin, token, run_id)

        private_pg.stop()
        for name, call in calls.items():
            answer = call()  # type: ignore[operator]
            assert answer.status_code == 503, (name, answer.status_code, answer.text)
            assert answer.json()["error"] == "unavailable" and int(answer.headers["Retry-After"]) >= 1, name
        assert http.get("/readyz").status_code == 503
        assert http.get("/healthz").status_code == 200

        private_pg.start()
        deadline = time.monotonic() + HANG_S
        while http.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the server did not recover by itself"
            time.sleep(0.5)
        # a pooled connection broken by the restart may fail a call or more, as 503: asked until answered
        deadline = time.monotonic() + HANG_S
        while (answer := http.get("/v0/state/session/k", headers=token)).status_code == 503:
            assert time.monotonic() < deadline, "the server did not recover by itself"
            time.sleep(0.2)
        assert answer.json() == {"value": 1, "version": 1}
        assert http.put("/v0/state/session/k", json={"value": 2, "if_version": 1}, headers=token).json() == {
            "version": 2
        }
        assert "internal error" not in info.log(), "a request hit the 500 handler"
