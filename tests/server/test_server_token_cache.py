"""Run tokens stay exactly as valid as the store says, though each server keeps what a token stands for.

``Platform.authenticate_run`` keeps a token's caller in process and reads only its validity from
the store on every call: these tests end the invocation elsewhere (another app on the same file,
another server process, the store directly) after a successful use and expect the next call to be
401 at once. They also pin the raw ASGI state routes' error answers and metrics.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import bearer, token

from keepstate.clock import now_ms
from keepstate.platform import Platform, service
from keepstate.server.app import create_app
from serverproc import running_server

ROOT = "ks_root_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"  # serve refuses a weak admin key


async def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test")


@pytest.fixture
async def two_apps(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, str]]:
    """Two apps (two servers' worth of platform, each with its own token cache) on one SQLite file."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first = create_app(url, bootstrap_admin=True, admin_key=ROOT)
    second = create_app(url, bootstrap_admin=True, admin_key=ROOT)
    async with (
        first.router.lifespan_context(first),
        second.router.lifespan_context(second),
        await _client(first) as a,
        await _client(second) as b,
    ):
        yield a, b, str(tmp_path / "shared.db")


async def _claimed(client: httpx.AsyncClient, agent: str = "a") -> dict[str, Any]:
    started = await client.post("/v0/runs", json={"agent": agent}, headers=bearer(ROOT))
    assert started.status_code == 202, started.text
    claimed = await client.post("/v0/invocations/claim", json={"agents": [agent]}, headers=bearer(ROOT))
    assert claimed.status_code == 200, claimed.text
    found: dict[str, Any] = claimed.json()
    return found


async def _used(client: httpx.AsyncClient, value: str) -> None:
    """The token works (so its caller is now kept by this app)."""
    put = await client.put("/v0/state/run/k", json={"value": 1}, headers=token(value))
    assert put.status_code == 200, put.text
    got = await client.get("/v0/state/run/k", headers=token(value))
    assert got.status_code == 200 and got.json() == {"value": 1, "version": 1}


async def _refused(client: httpx.AsyncClient, value: str) -> None:
    got = await client.get("/v0/state/run/k", headers=token(value))
    assert got.status_code == 401, got.text
    assert got.json()["error"] == "unauthorized"
    put = await client.put("/v0/state/run/k", json={"value": 2}, headers=token(value))
    assert put.status_code == 401, put.text


@pytest.mark.parametrize("kind", ["complete", "fail", "hold"])
async def test_a_token_ended_through_another_server_is_refused_at_once(
    two_apps: tuple[httpx.AsyncClient, httpx.AsyncClient, str], kind: str
) -> None:
    a, b, _ = two_apps
    inv = await _claimed(a)
    await _used(a, inv["token"])
    body = {"error": {"type": "E", "message": "no"}} if kind == "fail" else {}
    ended = await b.post(f"/v0/invocations/{inv['id']}/{kind}", json=body, headers=token(inv["token"]))
    assert ended.status_code == 200, ended.text
    await _refused(a, inv["token"])
    await _refused(b, inv["token"])


async def test_a_lease_that_ran_out_in_the_store_is_refused_at_once(
    two_apps: tuple[httpx.AsyncClient, httpx.AsyncClient, str],
) -> None:
    a, _, path = two_apps
    inv = await _claimed(a)
    await _used(a, inv["token"])
    with sqlite3.connect(path) as conn:  # as if the lease had run out: nobody on the server side saw it happen
        conn.execute("UPDATE ks_invocations SET lease_until = ? WHERE id = ?", (now_ms() - 1, inv["id"]))
    got = await a.get("/v0/state/run/k", headers=token(inv["token"]))
    assert got.status_code == 401 and "lease ran out" in got.json()["message"]
    run = await a.get(f"/v0/runs/{inv['run_id']}", headers=bearer(ROOT))
    assert run.json()["status"] == "interrupted"
    await _refused(a, inv["token"])


async def test_a_token_ended_directly_in_the_store_is_refused_at_once(
    two_apps: tuple[httpx.AsyncClient, httpx.AsyncClient, str],
) -> None:
    a, _, path = two_apps
    inv = await _claimed(a)
    await _used(a, inv["token"])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ks_invocations SET status = 'lost' WHERE id = ?", (inv["id"],))
    await _refused(a, inv["token"])


def test_a_token_ended_through_another_server_process_is_refused_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'procs.db'}"
    with (
        running_server(url, admin_key=ROOT) as one,
        running_server(url, admin_key=ROOT) as two,
        httpx.Client(base_url=one.url, timeout=30) as first,
        httpx.Client(base_url=two.url, timeout=30) as second,
    ):
        first.post("/v0/runs", json={"agent": "p"}, headers=bearer(ROOT)).raise_for_status()
        inv = first.post("/v0/invocations/claim", json={"agents": ["p"]}, headers=bearer(ROOT)).json()
        headers = token(inv["token"])
        assert first.put("/v0/state/run/k", json={"value": 1}, headers=headers).status_code == 200
        assert first.get("/v0/state/run/k", headers=headers).status_code == 200
        done = second.post(f"/v0/invocations/{inv['id']}/complete", json={}, headers=headers)
        assert done.status_code == 200, done.text
        assert first.get("/v0/state/run/k", headers=headers).status_code == 401
        assert first.put("/v0/state/run/k", json={"value": 2}, headers=headers).status_code == 401


async def test_the_kept_callers_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "RUN_CALLER_LIMIT", 3)
    app = create_app("memory://", bootstrap_admin=True, admin_key=ROOT)
    async with app.router.lifespan_context(app), await _client(app) as client:
        platform: Platform = app.state.platform
        tokens = [(await _claimed(client, f"b{i}"))["token"] for i in range(5)]
        for value in tokens:
            await _used(client, value)
            assert len(platform._run_callers) <= 3
        for value in tokens:  # forgotten or kept, every token still works
            assert (await client.get("/v0/state/run/k", headers=token(value))).status_code == 200


async def test_state_route_errors_keep_the_api_shape_and_metrics_see_the_template() -> None:
    app = create_app("memory://", bootstrap_admin=True, admin_key=ROOT)
    async with app.router.lifespan_context(app), await _client(app) as client:
        missing = await client.get("/v0/state/run/k")
        assert missing.status_code == 401 and missing.json()["error"] == "unauthorized"
        inv = await _claimed(client)
        headers = token(inv["token"])
        absent = await client.get("/v0/state/run/nothing", headers=headers)
        assert absent.status_code == 404 and absent.json()["error"] == "not_found"
        bad = await client.get("/v0/state/nope/k", headers=headers)
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_request"
        bad_body = await client.put("/v0/state/run/k", content=b"[1]", headers=headers)
        assert bad_body.status_code == 400 and bad_body.json()["error"] == "invalid_request"
        deleted = await client.delete("/v0/state/run/nothing", headers=headers)
        assert deleted.status_code == 204 and deleted.content == b""
        head = await client.head("/v0/state/run/nothing", headers=headers)
        assert head.status_code == 404
        metrics = (await client.get("/metrics")).text
        route = 'route="/v0/state/{scope}/{key}"'
        for method in ("GET", "HEAD"):
            assert f'keepstate_http_requests_total{{method="{method}",{route},status="404"}} 1.0' in metrics
        assert 'route="/v0/state/{scope}/{key}",status="401"' in metrics
