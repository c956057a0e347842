"""The console as the people around the agents use it, in headless Chromium against a real ``keepstate
serve``: the runs waiting for them (live, newest first, with the count in the header, decided from
there, with who decided and when kept), new runs coming into Runs without a reload, the agent and
user scopes, owners by key name, a phone's width, a dark system theme, the icon, and ``/`` of the
server leading a browser to the console while API clients keep their JSON 404.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from console_support import Console, bearer
from playwright.sync_api import Browser, Page, Response, ViewportSize, expect
from test_console_browser import LIVE_S, shoot, signed_in

from keepstate.client import Invocation, Worker
from serverproc import ServerInfo

PHONE: ViewportSize = {"width": 390, "height": 844}


def hold(console: Console, member: str, worker: str, question: str, session_id: str | None = None) -> str:
    """A run of a fresh agent held with ``question`` by a worker through the API; its id."""
    agent = f"ask-{uuid.uuid4().hex[:6]}"
    body: dict[str, Any] = {"agent": agent, **({"session_id": session_id} if session_id else {})}
    run = console.api("POST", "/v0/runs", member, json=body)
    claimed = console.api("POST", "/v0/invocations/claim", worker, json={"agents": [agent], "wait": 5})
    answer = console.http.post(
        f"/v0/invocations/{claimed['id']}/hold",
        json={"request": {"question": question}},
        headers={"x-agentos-run-token": claimed["token"]},
    )
    assert answer.status_code == 200, answer.text
    return str(run["id"])


def expect_waiting(page: Page, count: str) -> None:
    """The header's count of runs waiting (``data-waiting``, and the number it shows)."""
    badge = page.locator("[data-waiting]")
    expect(badge).to_have_attribute("data-waiting", count, timeout=LIVE_S)
    expect(badge).to_have_text(re.compile(rf"\b{re.escape(count)}$"))


def test_runs_waiting_for_a_person_come_in_live_and_are_decided_there(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str], console: Console, screenshot_dir: Path
) -> None:
    page = signed_in(browser, console_server, keys["memberB"])  # a member with nothing waiting yet
    expect_waiting(page, "0")
    page.get_by_role("link", name=re.compile("^Waiting")).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Waiting for you")
    expect(page.locator("main")).to_contain_text("Nothing is waiting for you.")
    page.evaluate("window.__same_page = true")

    first = hold(console, keys["memberB"], keys["worker"], "Refund 12.50 for parcel 1042?")
    cards = page.locator("article.held")
    expect(cards).to_have_count(1, timeout=LIVE_S)
    expect_waiting(page, "1")
    page.locator("article.held textarea").fill("typing while a second arrives")
    second = hold(console, keys["memberB"], keys["worker"], "Cancel order 77?")
    expect(cards).to_have_count(2, timeout=LIVE_S)
    expect(cards.first).to_contain_text("Cancel order 77?")  # newest first
    expect(cards.nth(1)).to_contain_text("Refund 12.50")
    expect(cards.nth(1).locator("textarea")).to_have_value("typing while a second arrives")  # left alone
    assert page.evaluate("window.__same_page") is True  # no reload
    expect_waiting(page, "2")
    hold(console, keys["memberA"], keys["worker"], "Not B's to decide")
    shoot(page, screenshot_dir, "waiting")

    cards.nth(1).locator("textarea").fill("Refund approved")
    cards.nth(1).get_by_role("button", name="Approve").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Waiting for you")
    expect(cards).to_have_count(1)
    expect(cards.first).to_contain_text("Cancel order 77?")
    expect_waiting(page, "1")
    decided = console.api("GET", f"/v0/runs/{first}", keys["memberB"])
    assert (decided["status"], decided["decision"]["by"], decided["decision"]["data"]) == (
        "queued",
        "B",
        {"note": "Refund approved"},
    )
    page.goto(f"/console/runs/{first}")
    expect(page.locator("dd.decided")).to_contain_text("approved by B at ")
    expect(page.locator("dd.decided time")).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT"))
    assert second in page.goto("/console/waiting").text()  # type: ignore[union-attr]
    page.context.close()

    admin = signed_in(browser, console_server, keys["admin"])
    admin.get_by_role("link", name=re.compile("^Waiting")).click()
    expect(admin.locator("article.held", has_text="Not B's to decide")).to_have_count(1)  # an admin's: every one
    admin.context.close()


def test_new_runs_come_into_runs_without_a_reload(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str], console: Console
) -> None:
    page = signed_in(browser, console_server, keys["memberA"])
    page.get_by_role("link", name="Runs").click()
    page.evaluate("window.__same_page = true")
    agent = f"fresh-{uuid.uuid4().hex[:6]}"
    run = console.api("POST", "/v0/runs", keys["memberA"], json={"agent": agent})
    row = page.get_by_role("table", name="Runs").locator("tbody tr").first
    expect(row).to_contain_text(run["id"], timeout=LIVE_S)
    expect(row.locator("[data-status]")).to_have_text("queued")
    console.api("POST", f"/v0/runs/{run['id']}/cancel", keys["memberA"])
    expect(row.locator("[data-status]")).to_have_text("cancelled", timeout=LIVE_S)
    assert page.evaluate("window.__same_page") is True
    page.context.close()


def keeper(inv: Invocation) -> Any:
    """Keeps something in its agent scope and its end user's scope."""
    inv.state.agent.put("catalogue", {"version": 3, "items": ["tea", "coffee"]})
    inv.state.user.put("preferences", {"drink": "tea"})
    return {"ok": True}


def test_agent_and_user_state_and_owners_by_name(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
    background: Callable[[Worker], None],
) -> None:
    agent = f"keeper-{uuid.uuid4().hex[:6]}"
    worker = Worker(console_server.url, keys["worker"], claim_wait=1)
    worker.agent(agent)(keeper)
    background(worker)
    session = console.api("POST", "/v0/sessions", keys["memberA"], json={"user": "cust-9"})
    run = console.api("POST", "/v0/runs", keys["memberA"], json={"agent": agent, "session_id": session["id"]})
    assert console.api("GET", f"/v0/runs/{run['id']}?wait=20", keys["memberA"])["status"] == "done"

    page = signed_in(browser, console_server, keys["admin"])
    row = page.get_by_role("table", name="Sessions").locator("tbody tr", has_text=session["id"])
    expect(row.locator("td").nth(2)).to_have_text("A")  # the owner's key name, not its id
    row.get_by_role("link", name=session["id"]).click()
    expect(page.locator("dl.facts")).to_contain_text("A")
    page.get_by_role("link", name=f"State of agent {agent}").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"State of agent {agent}")
    expect(page.get_by_role("region", name="catalogue")).to_contain_text('"coffee"')
    page.get_by_label("User").fill("cust-9")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"State of user cust-9 with agent {agent}")
    expect(page.get_by_role("region", name="preferences")).to_contain_text('"drink": "tea"')
    page.get_by_role("link", name="Agents").click()
    page.get_by_role("link", name=f"State of {agent}").click()
    expect(page.get_by_role("region", name="catalogue")).to_be_visible()
    page.context.close()

    member = signed_in(browser, console_server, keys["memberA"])
    answer = member.goto(f"/console/agents/{agent}/state")
    assert answer is not None and answer.status == 403  # the API's rule: agent and user scopes are for admins
    member.context.close()


PHONE_PAGES = ("/console/sessions", "/console/runs", "/console/waiting", "/console/agents", "/console/keys")


def test_a_phone_s_width_keeps_the_header_usable_and_nothing_wider_than_the_screen(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str], console: Console, screenshot_dir: Path
) -> None:
    session = console.api("POST", "/v0/sessions", keys["memberA"], json={"user": "a-rather-long-end-user-name-1234"})
    run_id = hold(console, keys["memberA"], keys["worker"], "Approve from a phone?", session["id"])
    page = signed_in(browser, console_server, keys["admin"], PHONE, is_mobile=True, has_touch=True)
    for path in (*PHONE_PAGES, f"/console/sessions/{session['id']}", f"/console/runs/{run_id}"):
        page.goto(path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{path} is {width} px wide"
        sign_out = page.get_by_role("button", name="Sign out")
        expect(sign_out).to_be_in_viewport(ratio=1)
        box = sign_out.bounding_box()
        assert box is not None and box["height"] >= 24 and box["x"] + box["width"] <= PHONE["width"]
        for link in ("Sessions", "Runs", "Agents"):
            expect(page.get_by_role("navigation", name="Console").get_by_role("link", name=link)).to_be_in_viewport()
    page.goto("/console/runs")
    shoot(page, screenshot_dir, "phone-runs")
    page.goto(f"/console/runs/{run_id}")
    shoot(page, screenshot_dir, "phone-run-held")
    page.get_by_role("button", name="Sign out").tap()
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    page.context.close()


def luminance(css_colour: str) -> float:
    red, green, blue = (int(part) for part in re.findall(r"\d+", css_colour)[:3])
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


def test_dark_mode_follows_the_system(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str], screenshot_dir: Path
) -> None:
    backgrounds = {}
    for scheme in ("light", "dark"):
        page = signed_in(browser, console_server, keys["admin"], color_scheme=scheme)
        page.goto("/console/agents")
        body = page.evaluate("[getComputedStyle(document.body).backgroundColor, getComputedStyle(document.body).color]")
        backgrounds[scheme] = (luminance(body[0]), luminance(body[1]))
        if scheme == "dark":
            shoot(page, screenshot_dir, "agents-dark")
        page.context.close()
    assert backgrounds["light"][0] > 0.8 and backgrounds["light"][1] < 0.3  # dark text on light
    assert backgrounds["dark"][0] < 0.2 and backgrounds["dark"][1] > 0.7  # light text on dark


def test_no_page_asks_for_something_that_is_not_there(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str]
) -> None:
    """The icon included: no 404 in the browser's log on any page, signed out or in."""
    missing: list[str] = []
    context = browser.new_context(base_url=console_server.url)
    context.on("response", lambda answer: missing.append(answer.url) if answer.status == 404 else None)
    page = context.new_page()
    page.goto("/console/")
    page.get_by_label("API key").fill(keys["admin"])
    page.get_by_role("button", name="Sign in").click()
    for path in PHONE_PAGES:
        page.goto(path)
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    assert icon is not None and page.request.get(icon).status == 200
    favicon: Response | None = page.goto("/favicon.ico")
    assert favicon is not None and favicon.status == 200 and favicon.headers["content-type"] == "image/svg+xml"
    assert missing == []
    context.close()


def test_the_server_root_leads_a_browser_to_the_console(browser: Browser, console_server: ServerInfo) -> None:
    page = browser.new_page()
    page.goto(console_server.url + "/")
    expect(page).to_have_url(console_server.url + "/console/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    page.close()
    for accept in ("application/json", "*/*", None):
        headers = {} if accept is None else {"Accept": accept}
        answer = httpx.get(console_server.url + "/", headers=headers)
        assert answer.status_code == 404 and answer.json()["error"] == "not_found", accept
    posted = httpx.post(console_server.url + "/", headers={"Accept": "text/html"})
    assert posted.status_code == 404 and posted.json()["error"] == "not_found"
    assert httpx.get(console_server.url + "/v0/sessions", headers=bearer("nope")).status_code == 401
