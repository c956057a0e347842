"""The console's newer pages in this process (the app ``keepstate serve`` runs, over a memory store):
an agent's and an end user's state for an admin and the API's 403 for a member, a decided run's page
saying who decided and when, and the server's ``/`` and ``/favicon.ico``. The browser tests
(``test_console_people.py``) drive the same pages in Chromium against a real server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from console_support import in_process, sign_in

from keepstate.platform import Invocations, Platform, StateApi
from keepstate.platform.models import Caller
from keepstate.platform.state import Address


@pytest.fixture
async def app() -> AsyncIterator[tuple[httpx.AsyncClient, Platform]]:
    async with in_process(f"memory://{uuid.uuid4().hex}") as found:
        yield found


async def test_agent_and_user_state_pages_are_an_admin_s(app: tuple[httpx.AsyncClient, Platform]) -> None:
    client, platform = app
    admin_key, admin = await platform.create_key("default", "admin", "Ops")
    api = StateApi(platform.state)
    caller = Caller("default", "admin", admin_key.id)
    await api.write(
        await api.namespace(platform, caller, Address("agent", agent="shop")), "put", "stock", {"value": {"tea": 3}}
    )
    user_ns = await api.namespace(platform, caller, Address("user", id="ada", agent="shop"))
    await api.write(user_ns, "append", "basket", {"items": ["<b>tea</b>"]})
    await sign_in(client, admin)
    agent_page = await client.get("/console/agents/shop/state")
    assert (
        agent_page.status_code == 200 and "State of agent" in agent_page.text and "&#34;tea&#34;: 3" in agent_page.text
    )
    user_page = await client.get("/console/agents/shop/state", params={"user": "ada"})
    assert (
        user_page.status_code == 200 and "&lt;b&gt;tea&lt;/b&gt;" in user_page.text and "<b>tea" not in user_page.text
    )
    assert (await client.get("/console/agents/shop/state", params={"user": "bad user!"})).status_code == 400
    member = (await platform.create_key("default", "member", None))[1]
    client.cookies.clear()
    await sign_in(client, member)
    assert (await client.get("/console/agents/shop/state")).status_code == 403


async def test_a_decided_run_says_who_decided_and_when(app: tuple[httpx.AsyncClient, Platform]) -> None:
    client, platform = app
    _, member = await platform.create_key("default", "member", "Ada")
    csrf = await sign_in(client, member)
    started = await client.post("/v0/runs", json={"agent": "ask"}, headers={"Authorization": f"Bearer {member}"})
    run_id = started.json()["id"]
    worker_key = (await platform.create_key("default", "worker", None))[0]
    invocations = Invocations(platform)
    claimed = await invocations.claim(Caller("default", "worker", worker_key.id), ["ask"], 0)
    assert claimed is not None
    await invocations.finish(claimed.token, claimed.invocation.id, "hold", {"request": {"q": "ok?"}})
    origin = {"Origin": str(client.base_url).rstrip("/")}
    fields = {"csrf": csrf, "decision": "deny", "note": "no", "back": "waiting"}
    answer = await client.post(f"/console/runs/{run_id}/decision", data=fields, headers=origin)
    assert (answer.status_code, answer.headers["location"]) == (303, "/console/waiting")
    page = (await client.get(f"/console/runs/{run_id}")).text
    assert "denied</span> by <strong>Ada</strong> at <time" in page and "&#34;note&#34;: &#34;no&#34;" in page


async def test_the_server_root_and_its_icon(app: tuple[httpx.AsyncClient, Platform]) -> None:
    client, _ = app
    browser = await client.get("/", headers={"Accept": "text/html,application/xhtml+xml"})
    assert (browser.status_code, browser.headers["location"]) == (303, "/console/")
    api = await client.get("/", headers={"Accept": "application/json"})
    assert api.status_code == 404 and api.json()["error"] == "not_found"
    icon = await client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml" and b"<svg" in icon.content
