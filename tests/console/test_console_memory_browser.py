"""An agent's memory in a real headless Chromium: from a session to its end user's folder, a search
with the store's engine (SQLite FTS5), and one document, as an admin reads them.

An embedded app writes the memory and registers its session on a SQLite file (``keepstate.open``),
then ``keepstate serve`` serves the same file; the admin signs in and follows the links.
"""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, expect
from test_console_browser import shoot, signed_in

import keepstate
from serverproc import running_server

SESSION, AGENT, USER = "support-12", "helpdesk", "ada"
SHARED = {
    "kb/returns": "Returns policy\nItems may be returned within 30 days with the receipt; refunds take 5 days.",
    "kb/shipping": "Shipping\nParcels leave the depot on weekdays. A late parcel is traced after 3 days.",
    "kb/warranty": "Warranty\nTwo years on every device; the parcel label is not needed.",
}
ADA = {
    "users/{user}/preferences": "Preferences\nPrefers email over phone. Ships to Lyon.",
    "users/{user}/orders/1042": "Order 1042\nA kettle, sent on Monday; the parcel is late.",
}


def write(url: str) -> None:
    """What the app does: shared knowledge, the user's folder, a registered session."""
    with keepstate.open(url) as store:
        shared = store.memory(AGENT)
        for path, text in SHARED.items():
            shared.write(path, text, {"source": "handbook"})
        ada = store.memory(AGENT, user=USER)
        for path, text in ADA.items():
            ada.write(path, text, {"source": "chat"})
        store.memory(AGENT, user="bob").write("users/{user}/preferences", "Preferences\nBob's parcel is secret.")
        assert store.register_session(SESSION, AGENT, user=USER)
        store.scope("session", agent=AGENT, id=SESSION).append(
            "history", [{"role": "user", "content": "Where is my parcel 1042?"}]
        )


def test_an_admin_follows_a_session_to_its_user_s_memory_and_searches_it(
    browser: Browser, tmp_path: Path, screenshot_dir: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    write(url)
    with running_server(url) as server:
        page = signed_in(browser, server, server.admin_key)
        page.get_by_role("link", name=SESSION).click()
        folder = page.get_by_role("table", name=f"Memory of user {USER}")
        expect(folder.locator("tbody tr")).to_have_count(2)
        expect(folder).to_contain_text("users/ada/orders/1042")
        expect(folder).to_contain_text("users/ada/preferences")
        expect(page.locator("main")).not_to_contain_text("users/bob")
        shoot(page, screenshot_dir, "session-memory")

        page.get_by_role("link", name=f"Search users/{USER}/ in the memory of {AGENT}").click()
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Memory of {AGENT}")
        expect(page.get_by_role("table", name="Documents").locator("tbody tr")).to_have_count(2)
        page.get_by_role("link", name="Every document").click()
        expect(page.get_by_role("table", name="Documents").locator("tbody tr")).to_have_count(6)

        page.get_by_label("Search memory").fill("late parcel")
        page.get_by_role("button", name="Search").click()
        results = page.get_by_role("table", name="Search results").locator("tbody tr")
        expect(results).to_have_count(2)  # the documents holding both words, in any folder (an admin's view)
        expect(page.get_by_role("table", name="Search results")).to_contain_text("kb/shipping")
        expect(page.get_by_role("table", name="Search results")).to_contain_text("users/ada/orders/1042")
        expect(page.locator("td.snippet mark").first).to_be_visible()
        shoot(page, screenshot_dir, "memory")

        page.get_by_label("Search memory").fill('"late parcel"')
        page.get_by_role("button", name="Search").click()
        expect(results).to_have_count(1)
        results.first.get_by_role("link").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Document kb/shipping")
        expect(page.get_by_label("Text")).to_have_text(SHARED["kb/shipping"])
        expect(page.locator("pre.json")).to_contain_text("handbook")
        shoot(page, screenshot_dir, "document")
        page.context.close()
