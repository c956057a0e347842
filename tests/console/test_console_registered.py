"""A conversation an embedded app wrote, seen in the console of a real ``keepstate serve`` in Chromium.

The app writes through ``keepstate.open`` on a SQLite file (``store.scope(...)`` and
``register_session``), before the server starts and while it serves (two processes on one file); an
admin signs in, finds the session in the list and reads its messages as a conversation. The session
has no owner, so a member does not see it.
"""

from __future__ import annotations

from pathlib import Path

from console_support import Console
from playwright.sync_api import Browser, expect
from test_console_browser import shoot, signed_in

import keepstate
from serverproc import running_server

SESSION, AGENT = "support-7", "helpdesk"
OWNER_COLUMN = 2  # Session, User, Owner, ...
FIRST = [
    {"role": "user", "content": "My parcel 1042 has not arrived."},
    {"role": "assistant", "content": "Sorry about that: it left the depot this morning."},
]
LATER = [{"role": "user", "content": "Thanks, I will wait."}]


def write(url: str, messages: list[dict[str, str]]) -> None:
    """What an app on an embedded store does at each turn: register (again is harmless), then append."""
    with keepstate.open(url) as store:
        assert store.register_session(SESSION, AGENT, user="ada", metadata={"channel": "chat widget"})
        store.scope("session", agent=AGENT, id=SESSION).append("history", messages)


def test_a_session_an_embedded_app_registered_is_listed_and_shown_as_a_conversation(
    browser: Browser, tmp_path: Path, screenshot_dir: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    write(url, FIRST)
    with running_server(url) as server:
        write(url, LATER)  # the app goes on while the server serves the same file
        page = signed_in(browser, server, server.admin_key)
        row = page.get_by_role("table", name="Sessions").locator("tbody tr", has_text=SESSION)
        expect(row).to_have_count(1)
        expect(row).to_contain_text("ada")
        expect(row.locator("td").nth(OWNER_COLUMN)).to_have_text("—")  # no owner, not a blank
        page.get_by_role("link", name=SESSION).click()
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Session {SESSION}")
        expect(page.get_by_role("heading", name=f"Agent {AGENT}")).to_be_visible()
        messages = page.get_by_role("region", name="history", exact=True).locator("li.message")
        expect(messages).to_have_count(3)
        for index, message in enumerate(FIRST + LATER):
            expect(messages.nth(index)).to_have_attribute("data-role", message["role"])
            expect(messages.nth(index)).to_contain_text(message["content"])
        expect(page.locator("pre.json")).to_contain_text("chat widget")
        shoot(page, screenshot_dir, "session-registered")
        page.context.close()

        console = Console(server.url, server.admin_key)
        member = console.new_key("member", "someone")[1]
        console.close()
        page = signed_in(browser, server, member)
        expect(page.get_by_role("table", name="Sessions")).not_to_contain_text(SESSION)
        page.goto(f"/console/sessions/{SESSION}")
        expect(page.get_by_role("heading", level=1)).not_to_have_text(f"Session {SESSION}")
        page.context.close()
