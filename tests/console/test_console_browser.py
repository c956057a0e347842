"""The console in a real headless Chromium, against a real ``keepstate serve`` with real SDK workers.

What a person does: sign in, find a session and read its conversation, approve a held run with a
note and watch its resume finish, deny another, cancel a queued run, watch a run's status change in
place; what they must never get: another member's session, the Keys page as a member, a stored
``<img onerror>`` run as script, a page with inline script or without the console's CSP, a session
that outlives its key. The same tests take the screenshots of ``docs/console.md``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from console_support import Console, bearer
from playwright.sync_api import Browser, Dialog, Page, ViewportSize, expect

from keepstate.client import Invocation, Worker
from keepstate.server.console.render import CSP
from serverproc import ServerInfo

XSS = "<img src=x onerror=alert(1)>"
LIVE_S = 15_000  # ms a live update may take here (the page polls every 1.5 s; the machine is shared)


def chat(inv: Invocation) -> Any:
    """Keeps the session's conversation (``history``) and a turn count (``profile``)."""
    said = inv.input["message"]
    inv.state.session.append(
        "history", [{"role": "user", "content": said}, {"role": "assistant", "content": f"You said: {said}"}]
    )
    profile = inv.state.session.update("profile", lambda p: {**p, "turns": p["turns"] + 1}, default={"turns": 0})
    return {"reply": f"You said: {said}", "turns": profile["turns"]}


def approver(inv: Invocation) -> Any:
    """Holds for a person's decision, with a draft in its run state; its resume reports the decision."""
    if inv.kind == "start":
        inv.state.run.put("draft", {"refund": "12.50", "order": inv.input["order"]})
        inv.hold({"question": "Refund 12.50?", "order": inv.input["order"]})
    return {"approved": inv.decision["approved"], "data": inv.decision["data"]}


def later(inv: Invocation) -> Any:
    return {"finished": True}


AGENTS = {"chat": chat, "approver": approver, "later": later}


def worker_for(server: ServerInfo, keys: dict[str, str], *names: str) -> Worker:
    """A worker serving ``names`` of ``AGENTS`` (all of them when none are named)."""
    worker = Worker(server.url, keys["worker"], concurrency=2, claim_wait=1)
    for name in names or AGENTS:
        worker.agent(name)(AGENTS[name])
    return worker


def signed_in(
    browser: Browser, server: ServerInfo, key: str, viewport: ViewportSize | None = None, **options: Any
) -> Page:
    """A fresh browser context (its own cookies), signed in with ``key`` through the sign-in form;
    ``options`` are Playwright's (``color_scheme``, ``is_mobile``…)."""
    context = browser.new_context(base_url=server.url, viewport=viewport or {"width": 1280, "height": 860}, **options)
    page = context.new_page()
    page.goto("/console/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Sessions")
    return page


def shoot(page: Page, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5_000


def run_id_of(page: Page) -> str:
    return page.url.rstrip("/").rsplit("/", 1)[1]


def test_sign_in_refuses_a_wrong_key_and_never_keeps_the_key(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str], screenshot_dir: Path
) -> None:
    context = browser.new_context(base_url=console_server.url, viewport={"width": 1280, "height": 700})
    page = context.new_page()
    page.goto("/console/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    shoot(page, screenshot_dir, "sign-in")
    page.get_by_label("API key").fill("ks_not_a_key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    page.get_by_label("API key").fill(keys["memberA"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Sessions")
    assert keys["memberA"] not in page.url
    cookies = context.cookies()
    assert {c["name"] for c in cookies} == {"keepstate_console"}
    session_cookie = cookies[0]
    flags = (session_cookie["httpOnly"], session_cookie["sameSite"], session_cookie["path"])
    assert flags == (True, "Strict", "/console/")
    assert keys["memberA"] not in session_cookie["value"]
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script can read it
    assert keys["memberA"] not in page.evaluate("JSON.stringify(localStorage) + JSON.stringify(sessionStorage)")
    context.close()


def test_find_a_session_and_read_its_conversation(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
    background: Callable[[Worker], None],
    screenshot_dir: Path,
) -> None:
    background(worker_for(console_server, keys))
    member = keys["memberA"]
    user = f"ada-{uuid.uuid4().hex[:6]}"
    session = console.api("POST", "/v0/sessions", member, json={"user": user, "metadata": {"channel": "support"}})
    console.api("POST", "/v0/sessions", member, json={"user": "someone-else"})
    for message in ("Where is my order 1042?", "Thanks, and can I change the address?"):
        run = console.api(
            "POST",
            "/v0/runs",
            member,
            json={"agent": "chat", "session_id": session["id"], "input": {"message": message}},
        )
        assert console.api("GET", f"/v0/runs/{run['id']}?wait=20", member)["status"] == "done"

    page = signed_in(browser, console_server, member)
    page.get_by_label("User").fill(user)
    page.get_by_role("button", name="Filter").click()
    table = page.get_by_role("table", name="Sessions")
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table.locator("tbody tr").first).to_contain_text("done")
    shoot(page, screenshot_dir, "sessions")
    page.get_by_role("link", name=session["id"]).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Session {session['id']}")
    history = page.get_by_role("region", name="history", exact=True)
    messages = history.locator("li.message")
    expect(messages).to_have_count(4)
    expect(messages.nth(0)).to_have_attribute("data-role", "user")
    expect(messages.nth(0)).to_contain_text("Where is my order 1042?")
    expect(messages.nth(1)).to_have_attribute("data-role", "assistant")
    expect(messages.nth(1)).to_contain_text("You said: Where is my order 1042?")
    user_box, assistant_box = messages.nth(0).bounding_box(), messages.nth(1).bounding_box()
    assert user_box and assistant_box and user_box["x"] > assistant_box["x"]  # roles apart: the user's on the right
    profile = page.get_by_role("region", name="profile", exact=True)
    expect(profile).to_contain_text("version 2")
    expect(profile.locator("pre")).to_have_text(re.compile(r'\{\s*"turns": 2\s*\}'))
    expect(page.get_by_role("table", name="Runs of this session").locator("tbody tr")).to_have_count(2)
    shoot(page, screenshot_dir, "session")
    page.context.close()


def seen_dialog(dialogs: list[str], dialog: Dialog) -> None:
    dialogs.append(dialog.message)
    dialog.dismiss()


def test_stored_markup_is_shown_as_text_and_never_runs(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
    background: Callable[[Worker], None],
) -> None:
    background(worker_for(console_server, keys))
    member = keys["memberA"]
    session = console.api("POST", "/v0/sessions", member, json={"metadata": {"note": XSS}})
    run = console.api(
        "POST", "/v0/runs", member, json={"agent": "chat", "session_id": session["id"], "input": {"message": XSS}}
    )
    assert console.api("GET", f"/v0/runs/{run['id']}?wait=20", member)["status"] == "done"
    console.new_key("member", name=XSS)

    dialogs: list[str] = []
    for key, path in (
        (member, f"/console/sessions/{session['id']}"),
        (member, f"/console/runs/{run['id']}"),
        (keys["admin"], "/console/keys"),
    ):
        page = signed_in(browser, console_server, key)
        page.on("dialog", lambda dialog: seen_dialog(dialogs, dialog))
        page.goto(path)
        expect(page.get_by_text(XSS).first).to_be_visible()
        assert page.locator("img").count() == 0
        page.context.close()
    assert dialogs == []


def test_approve_a_held_run_with_a_note_and_see_its_resume_finish(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
    background: Callable[[Worker], None],
    screenshot_dir: Path,
) -> None:
    member = keys["memberA"]
    run = console.api("POST", "/v0/runs", member, json={"agent": "approver", "input": {"order": 1042}})
    worker_for(console_server, keys, "approver").run(stop_after=1)  # the start only: the resume waits
    assert console.api("GET", f"/v0/runs/{run['id']}", member)["status"] == "held"

    page = signed_in(browser, console_server, member)
    page.get_by_role("link", name="Runs").click()
    page.get_by_role("link", name=run["id"]).click()
    expect(page.get_by_role("heading", name="Waiting for a decision")).to_be_visible()
    expect(page.locator(".decision pre")).to_contain_text("Refund 12.50?")
    expect(page.get_by_role("region", name="draft", exact=True)).to_contain_text('"refund": "12.50"')
    page.get_by_label("Note").fill("Approved: the parcel was lost")
    shoot(page, screenshot_dir, "run-held")
    page.get_by_role("button", name="Approve").click()
    status = page.locator("dd [data-status]")
    expect(status).to_have_text("queued")
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    expect(page.locator("dd.decided")).to_contain_text("approved by A at ")  # the key's name, and when
    decision = page.get_by_role("region", name="Decision data", exact=True)
    expect(decision).to_contain_text('"note": "Approved: the parcel was lost"')

    background(worker_for(console_server, keys))
    expect(page.locator("dd [data-status]")).to_have_text("done", timeout=LIVE_S)
    output = page.get_by_role("region", name="Output", exact=True)
    expect(output).to_contain_text('"approved": true')
    expect(output).to_contain_text('"note": "Approved: the parcel was lost"')
    shoot(page, screenshot_dir, "run-done")
    page.context.close()


def test_deny_another_held_run(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
    background: Callable[[Worker], None],
) -> None:
    background(worker_for(console_server, keys))
    member = keys["memberA"]
    run = console.api("POST", "/v0/runs", member, json={"agent": "approver", "input": {"order": 77}})
    assert console.api("GET", f"/v0/runs/{run['id']}?wait=20", member)["status"] == "held"
    page = signed_in(browser, console_server, member)
    page.goto(f"/console/runs/{run['id']}")
    page.get_by_role("button", name="Deny").click()
    expect(page.locator("dd [data-status]")).to_have_text("done", timeout=LIVE_S)
    expect(page.get_by_role("region", name="Output", exact=True)).to_contain_text('"approved": false')
    finished = console.api("GET", f"/v0/runs/{run['id']}", member)
    assert {name: finished["decision"][name] for name in ("approved", "data", "by")} == {
        "approved": False,
        "data": {},
        "by": "A",
    }
    assert finished["output"] == {"approved": False, "data": {}}
    expect(page.locator("dd.decided")).to_contain_text("denied by A at ")
    page.context.close()


def test_cancel_a_queued_run(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str], console: Console
) -> None:
    member = keys["memberA"]
    run = console.api("POST", "/v0/runs", member, json={"agent": "nobody-serves-this"})
    page = signed_in(browser, console_server, member)
    page.goto(f"/console/runs/{run['id']}")
    expect(page.locator("dd [data-status]")).to_have_text("queued")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("dd [data-status]")).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
    assert console.api("GET", f"/v0/runs/{run['id']}", member)["status"] == "cancelled"
    page.context.close()


def test_fork_a_session_from_its_page_and_follow_the_link_back_to_its_parent(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str], console: Console
) -> None:
    member = keys["memberA"]
    source = console.api("POST", "/v0/sessions", member, json={"metadata": {"channel": "web"}})
    plan = f"/v0/sessions/{source['id']}/state/planner/plan"
    console.api("PUT", plan, member, json={"value": {"step": "pack the boxes"}})
    page = signed_in(browser, console_server, member)
    page.goto(f"/console/sessions/{source['id']}")
    expect(page.locator("dd.parent")).to_have_count(0)
    page.get_by_role("button", name="Fork").click()
    expect(page.get_by_role("heading", level=1)).not_to_have_text(f"Session {source['id']}")
    fork_id = page.get_by_role("heading", level=1).locator("code").inner_text()
    assert console.api("GET", f"/v0/sessions/{fork_id}", member)["parent"] == source["id"]
    expect(page.locator("dd.parent")).to_have_text(source["id"])
    expect(page.get_by_role("region", name="Agent planner")).to_contain_text("pack the boxes")
    page.locator("dd.parent").get_by_role("link", name=source["id"]).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Session {source['id']}")
    page.context.close()


def test_fork_cuts_a_conversation_to_its_first_messages_and_the_sessions_list_links_the_parent(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str], console: Console, screenshot_dir: Path
) -> None:
    member = keys["memberA"]
    user = f"cut-{uuid.uuid4().hex[:6]}"
    source = console.api("POST", "/v0/sessions", member, json={"user": user})
    state = f"/v0/sessions/{source['id']}/state/chat"
    said = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"} for n in range(6)]
    console.api("POST", f"{state}/history/append", member, json={"items": said})
    console.api("POST", f"{state}/notes/append", member, json={"items": ["a", "b", "c"]})
    console.api("PUT", f"{state}/profile", member, json={"value": {"plan": "pro"}})
    page = signed_in(browser, console_server, member)
    page.goto(f"/console/sessions/{source['id']}")
    lists = page.get_by_label("List to cut").locator("option")
    expect(lists).to_have_text(["none: copy every list whole", "chat/history (6 items)", "chat/notes (3 items)"])
    page.get_by_label("List to cut").select_option("chat/history")
    page.get_by_label("Items to keep").fill("3")
    shoot(page, screenshot_dir, "session-fork")
    page.get_by_role("button", name="Fork").click()
    expect(page.get_by_role("heading", level=1)).not_to_have_text(f"Session {source['id']}")
    fork_id = page.get_by_role("heading", level=1).locator("code").inner_text()
    expect(page.locator("dd.parent")).to_have_text(source["id"])
    history = page.get_by_role("region", name="history", exact=True)
    expect(history.locator("li.message")).to_have_count(3)
    expect(history.locator("li.message").last).to_contain_text("message 2")
    expect(page.get_by_role("region", name="notes", exact=True).locator("ol.items li")).to_have_count(3)
    assert console.api("GET", f"{state}/history", member)["value"] == said  # the source keeps every message
    forked = console.api("GET", f"/v0/sessions/{fork_id}/state/chat/history", member)["value"]
    assert forked == said[:3]

    page.get_by_role("link", name="Sessions").click()
    row = page.get_by_role("table", name="Sessions").locator("tbody tr", has_text=fork_id)
    expect(row.locator("td.parent")).to_have_text(source["id"])
    first_cell = page.locator("td:first-child").get_by_role("link", name=source["id"], exact=True)
    expect(
        page.get_by_role("table", name="Sessions").locator("tbody tr", has=first_cell).locator("td.parent")
    ).to_have_text("—")
    row.locator("td.parent").get_by_role("link", name=source["id"]).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Session {source['id']}")

    page.get_by_label("Items to keep").fill("2")  # a count without a list: refused, nothing made
    page.get_by_role("button", name="Fork").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Bad request")
    expect(page.get_by_role("main")).to_contain_text("choose the list to cut")
    made = console.api("GET", f"/v0/sessions?user={user}", member)["sessions"]
    assert sorted((s["id"], s["parent"]) for s in made) == sorted([(source["id"], None), (fork_id, source["id"])])
    page.context.close()


def test_runs_page_shows_a_status_change_in_place(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
    background: Callable[[Worker], None],
    screenshot_dir: Path,
) -> None:
    member = keys["memberA"]
    run = console.api("POST", "/v0/runs", member, json={"agent": "later"})
    page = signed_in(browser, console_server, member)
    page.get_by_role("link", name="Runs").click()
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=run["id"]))
    expect(row.locator("[data-status]")).to_have_text("queued")
    shoot(page, screenshot_dir, "runs")
    page.evaluate("window.__same_page = true")
    background(worker_for(console_server, keys))
    expect(row.locator("[data-status]")).to_have_text("done", timeout=LIVE_S)
    assert page.evaluate("window.__same_page") is True  # updated in place, not reloaded
    page.get_by_label("Status").select_option("done")
    page.get_by_label("Agent").fill("later")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("table", name="Runs").get_by_role("link", name=run["id"])).to_be_visible()
    page.context.close()


def test_a_member_never_sees_another_members_session_or_the_keys(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
) -> None:
    session = console.api("POST", "/v0/sessions", keys["memberA"], json={"user": "private-user"})
    run = console.api("POST", "/v0/runs", keys["memberA"], json={"agent": "nobody", "session_id": session["id"]})
    page = signed_in(browser, console_server, keys["memberB"])
    expect(page.get_by_role("link", name=session["id"])).to_have_count(0)
    page.get_by_label("User").fill("private-user")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("table", name="Sessions").locator("tbody")).to_contain_text("No sessions")
    for path in (f"/console/sessions/{session['id']}", f"/console/runs/{run['id']}"):
        answer = page.goto(path)
        assert answer is not None and answer.status == 404
        expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
        expect(page.get_by_text("private-user")).to_have_count(0)  # nothing of it: the API's 404, not a 403
    page.goto("/console/runs")
    expect(page.get_by_role("link", name=run["id"])).to_have_count(0)
    expect(page.get_by_role("link", name="Keys")).to_have_count(0)
    answer = page.goto("/console/keys")
    assert answer is not None and answer.status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("Forbidden")
    page.context.close()


def test_admin_creates_a_key_shown_once_and_revokes_it(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
    screenshot_dir: Path,
) -> None:
    page = signed_in(browser, console_server, keys["admin"])
    page.get_by_role("link", name="Keys").click()
    page.get_by_label("Role").select_option("member")
    page.get_by_label("Name").fill("on-call")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_role("status", name="New key").inner_text().strip()
    assert secret.startswith("ks_")
    assert console.http.get("/v0/sessions", headers=bearer(secret)).status_code == 200
    page.goto("/console/keys")
    assert secret not in page.content()
    shoot(page, screenshot_dir, "keys")
    row = page.get_by_role("row").filter(has_text="on-call")
    row.get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("row").filter(has_text="on-call")).to_have_count(0)
    assert console.http.get("/v0/sessions", headers=bearer(secret)).status_code == 401
    page.context.close()


def test_agents_page_counts_runs_and_marks_an_unserved_agent(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
    screenshot_dir: Path,
) -> None:
    for _ in range(2):
        console.api("POST", "/v0/runs", keys["memberA"], json={"agent": "unserved"})
    console.api("POST", "/v0/runs", keys["memberA"], json={"agent": "served"})
    console.api("POST", "/v0/runs", keys["memberA"], json={"agent": "chat"})  # of its own, whatever ran before
    claimed = console.api("POST", "/v0/invocations/claim", keys["worker"], json={"agents": ["served"], "wait": 5})
    assert claimed is not None
    page = signed_in(browser, console_server, keys["admin"])
    page.get_by_role("link", name="Agents").click()
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="unserved", exact=True))
    expect(row.get_by_role("cell")).to_have_text(["unserved", "2", "0", "0", "never no worker", "State Memory"])
    expect(row).to_have_class("unserved")
    served = page.get_by_role("row").filter(has=page.get_by_role("link", name="served", exact=True))
    expect(served.get_by_role("cell").nth(2)).to_have_text("1")  # running: the claim took it
    expect(served.locator("td.claim")).to_contain_text(re.compile(r"UTC \(\d+ s ago\)"))
    expect(served.locator("td.claim")).not_to_contain_text("no worker")
    expect(served).not_to_have_class("unserved")
    expect(page.get_by_role("link", name="chat", exact=True)).to_be_visible()
    shoot(page, screenshot_dir, "agents")
    page.context.close()


def test_a_revoked_key_signs_its_browser_out(
    browser: Browser,
    console_server: ServerInfo,
    console: Console,
) -> None:
    key_id, secret = console.new_key("member", name="short-lived")
    page = signed_in(browser, console_server, secret)
    assert console.http.delete(f"/v0/keys/{key_id}", headers=bearer(console.admin)).status_code == 204
    page.reload()
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    assert page.request.get("/console/runs/status?ids=x").status == 401
    page.context.close()


def test_every_page_has_the_csp_and_no_inline_script_or_style(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
) -> None:
    run = console.api("POST", "/v0/runs", keys["memberA"], json={"agent": "nobody"})
    session = console.api("POST", "/v0/sessions", keys["memberA"], json={})
    page = signed_in(browser, console_server, keys["admin"])
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text) if "Content Security" in message.text else None)
    for path in (
        "/console/sessions",
        f"/console/sessions/{session['id']}",
        "/console/runs",
        f"/console/runs/{run['id']}",
        "/console/agents",
        "/console/keys",
        "/console/nowhere",
    ):
        answer = page.goto(path)
        assert answer is not None
        headers = answer.headers
        assert headers["content-security-policy"] == CSP, path
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "same-origin"
        inline = page.evaluate("""() => ({
            scripts: [...document.scripts].filter((s) => !s.src).length,
            styles: document.querySelectorAll('style, [style]').length,
            handlers: [...document.querySelectorAll('*')].flatMap((e) => [...e.attributes])
                .filter((a) => a.name.startsWith('on')).length,
        })""")
        assert inline == {"scripts": 0, "styles": 0, "handlers": 0}, path
        assert page.locator("h1").count() == 1, path
    assert violations == []
    page.context.close()


def test_sign_out_ends_the_session(browser: Browser, console_server: ServerInfo, keys: dict[str, str]) -> None:
    page = signed_in(browser, console_server, keys["memberB"])
    old = page.context.cookies()[0]
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    page.goto("/console/sessions")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    # the old cookie, replayed: its session is gone from the store
    page.context.add_cookies([{"name": old["name"], "value": old["value"], "url": f"{console_server.url}/console/"}])
    page.goto("/console/sessions")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    page.context.close()
