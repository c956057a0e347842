"""Ids and paths made of dots alone open what they name in a real headless Chromium.

``.`` and ``..`` are valid session ids, end users and agent names, and an end user named ``..`` has the
memory folder ``users/../``. A browser reads ``.`` and ``..`` in a link — also written ``%2E``, as every
WHATWG URL parser does — as path steps: ``users/../notes`` would open the shared ``notes``, and the
sessions ``.`` and ``..`` the console's front page. Here an admin follows the console's own links to
each and must land on exactly what the link names.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from playwright.sync_api import Browser, expect
from test_console_browser import signed_in

import keepstate
from keepstate.server.console.links import path, read_path, segment
from serverproc import running_server

AGENT = ".."
SHARED, DOTTED = "Shared notes for everyone.", "The notes of the user named two dots."


def write(url: str) -> None:
    with keepstate.open(url) as store:
        store.memory(AGENT).write("notes", SHARED)
        store.memory(AGENT, user="..").write("users/{user}/notes", DOTTED)
        store.memory(AGENT, user=".").write("users/{user}/notes", "The notes of the user named one dot.")
        for session_id, user in ((".", "."), ("..", "..")):
            assert store.register_session(session_id, AGENT, user=user)
            store.scope("session", agent=AGENT, id=session_id).put("said", f"in session {session_id}")


def test_sessions_users_and_agents_of_dots_alone_open_what_their_links_name(browser: Browser, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dots.db'}"
    write(url)
    with running_server(url) as server:
        page = signed_in(browser, server, server.admin_key)
        for session_id in ("..", "."):
            page.goto("/console/sessions")
            page.get_by_role("link", name=session_id, exact=True).first.click()
            expect(page.get_by_role("heading", level=1)).to_have_text(f"Session {session_id}")
            expect(page.locator("main")).to_contain_text(f"in session {session_id}")
        page.goto("/console/sessions")
        page.get_by_role("link", name="..", exact=True).first.click()
        page.get_by_role("link", name="users/../notes").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Document users/../notes")
        expect(page.get_by_label("Text")).to_have_text(DOTTED)
        page.get_by_role("link", name=AGENT, exact=True).click()
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Memory of {AGENT}")
        documents = page.get_by_role("table", name="Documents")
        expect(documents.locator("tbody tr")).to_have_count(3)
        documents.get_by_role("link", name="notes", exact=True).click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Document notes")
        expect(page.get_by_label("Text")).to_have_text(SHARED)
        page.context.close()


@pytest.mark.parametrize("text", [".", "..", "...", "a.b", "run_1", "a:b-c_d"])
def test_a_link_segment_reads_back_as_itself(text: str) -> None:
    written = segment(text)
    assert read_path(unquote(written)) == text  # the server decodes a path once, then the route reads it
    assert "/" not in written and not re.fullmatch(r"(?:\.|%2e)+", written, re.IGNORECASE)


def test_a_document_path_keeps_its_folders_and_escapes_each_dot_segment() -> None:
    assert path("users/../notes") == "users/%252E%252E/notes"
    assert read_path("users/%2E%2E/notes") == "users/../notes"
    assert read_path("kb/a.b/c") == "kb/a.b/c"
