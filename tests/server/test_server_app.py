"""In-process checks of the app (httpx.ASGITransport): the OpenAPI document and the memory store."""

from __future__ import annotations

import re

import httpx

from keepstate.server.app import create_app
from keepstate.server.openapi import DOCUMENT
from keepstate.server.routes import ROUTES


def _shape(path: str) -> str:
    return re.sub(r"\{[a-z_]+\}", "{}", path)


def test_openapi_documents_every_route_and_method() -> None:
    documented = {(_shape(path), method.upper()) for path, item in DOCUMENT["paths"].items() for method in item}
    served = {(_shape(route.path), method) for route in ROUTES for method in route.methods or () if method != "HEAD"}
    assert served <= documented
    assert DOCUMENT["openapi"] == "3.1.0"
    for item in DOCUMENT["paths"].values():
        for operation in item.values():
            assert operation["responses"]


async def test_memory_store_serves_a_whole_turn_in_process() -> None:
    app = create_app("memory://", bootstrap_admin=True, admin_key="root")
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test")
        admin = {"Authorization": "Bearer root"}
        session = (await client.post("/v0/sessions", json={"user": "u"}, headers=admin)).json()
        run = (await client.post("/v0/runs", json={"agent": "a", "session_id": session["id"]}, headers=admin)).json()
        busy = await client.post("/v0/runs", json={"agent": "a", "session_id": session["id"]}, headers=admin)
        assert busy.json()["error"] == "session_busy"
        inv = (await client.post("/v0/invocations/claim", json={"agents": ["a"]}, headers=admin)).json()
        headers = {"x-agentos-run-token": inv["token"]}
        appended = await client.post("/v0/state/user/h/append", json={"items": [1]}, headers=headers)
        assert appended.json() == {"version": 1, "length": 1}
        await client.post(f"/v0/invocations/{inv['id']}/complete", json={"output": 7}, headers=headers)
        done = (await client.get(f"/v0/runs/{run['id']}", headers=admin)).json()
        assert (done["status"], done["output"]) == ("done", 7)
        assert (await client.get("/v0/state/user/h", headers=headers)).status_code == 401
        await client.aclose()
