"""An agent's memory in the console over plain HTTP against a real ``keepstate serve``: the listing
(paged, with sizes), a document, the store's own search, a session's user folder, and the rules:
admins only (as the API's memory routes), another user's folder never on a session's page, stored
text never markup, bad paths and queries a page with a 4xx, never a 500.
"""

from __future__ import annotations

import html
import re
import uuid

import pytest
from console_support import Console, next_link, rows

from keepstate.server.console import views

RETURNS = "Returns policy\nItems may be returned within 30 days, with the receipt."
MENTION = "Shipping notes\nParcels leave on Mondays; a return label is in the box."


def agent_name() -> str:
    return f"mem-{uuid.uuid4().hex[:8]}"


def put(console: Console, agent: str, path: str, text: str, metadata: dict[str, object] | None = None) -> None:
    console.api("PUT", f"/v0/agents/{agent}/memory/{path}", console.admin, json={"text": text, "metadata": metadata})


def cells(page: str, label: str) -> list[list[str]]:
    """The text of each cell of each body row of the table named ``label``."""
    table = page.split(f'aria-label="{label}"', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [
        [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
        if 'class="empty"' not in row
    ]


@pytest.fixture
def agent(console: Console) -> str:
    name = agent_name()
    put(console, name, "kb/returns", RETURNS, {"source": "wiki"})
    put(console, name, "kb/shipping", MENTION)
    put(console, name, "kb/shipping", MENTION + "\nUpdated é.")  # version 2, non-ASCII bytes
    put(console, name, "users/alice/prefs", "Preferences\nPrefers email. Returns by post.")
    put(console, name, "users/bob/prefs", "Prefers phone.")
    return name


def test_an_admin_sees_the_agent_s_documents_with_version_updated_and_size(console: Console, agent: str) -> None:
    console.sign_in(console.admin)
    answer = console.http.get(f"/console/agents/{agent}/memory")
    assert answer.status_code == 200, answer.text
    assert f"<h1>Memory of <code>{agent}</code></h1>" in answer.text
    listed = cells(answer.text, "Documents")
    assert [row[0] for row in listed] == ["kb/returns", "kb/shipping", "users/alice/prefs", "users/bob/prefs"]
    shipping = listed[1]
    assert shipping[1] == "2" and "UTC" in shipping[2]
    assert shipping[3] == f"{len((MENTION + chr(10) + 'Updated é.').encode())} B"
    assert f'href="/console/agents/{agent}/memory/kb/returns"' in answer.text

    folder = console.http.get(f"/console/agents/{agent}/memory", params={"prefix": "users/alice/"})
    assert [row[0] for row in cells(folder.text, "Documents")] == ["users/alice/prefs"]


def test_a_long_listing_is_paged_in_the_store(console: Console) -> None:
    name = agent_name()
    for index in range(53):
        put(console, name, f"notes/n{index:03d}", f"note {index}")
    console.sign_in(console.admin)
    first = console.http.get(f"/console/agents/{name}/memory")
    assert rows(first.text) == 50
    link = next_link(first.text)
    assert link is not None
    second = console.http.get(link)
    assert [row[0] for row in cells(second.text, "Documents")] == ["notes/n050", "notes/n051", "notes/n052"]
    assert next_link(second.text) is None and "First page" in second.text


def test_a_document_page_shows_its_text_metadata_and_version_as_text(console: Console, agent: str) -> None:
    put(console, agent, "kb/xss", "<img src=x onerror=alert(1)>\n<script>alert(2)</script>", {"k": "<b>bold</b>"})
    console.sign_in(console.admin)
    answer = console.http.get(f"/console/agents/{agent}/memory/kb/xss")
    assert answer.status_code == 200, answer.text
    assert "<h1>Document <code>kb/xss</code></h1>" in answer.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in answer.text and "<img src=x" not in answer.text
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in answer.text and "<script>alert" not in answer.text
    assert "&lt;b&gt;bold&lt;/b&gt;" in answer.text
    shipping = console.http.get(f"/console/agents/{agent}/memory/kb/shipping")
    assert "<dt>Version</dt><dd>2</dd>" in shipping.text and "Updated é." in shipping.text
    user_doc = console.http.get(f"/console/agents/{agent}/memory/users/bob/prefs")
    assert user_doc.status_code == 200 and "Prefers phone." in user_doc.text


def test_search_uses_the_store_s_ranking_and_marks_the_matches(console: Console, agent: str) -> None:
    console.sign_in(console.admin)
    answer = console.http.get(f"/console/agents/{agent}/memory", params={"q": "returns"})
    assert answer.status_code == 200, answer.text
    hits = cells(answer.text, "Search results")
    assert hits[0][0] == "kb/returns", "the document with the word in its first line ranks first"
    assert {hit[0] for hit in hits} == {"kb/returns", "kb/shipping", "users/alice/prefs"}
    assert "<mark>" in answer.text and "**" not in answer.text.split('aria-label="Search results"', 1)[1]
    phrase = console.http.get(f"/console/agents/{agent}/memory", params={"q": '"return label"'})
    assert [hit[0] for hit in cells(phrase.text, "Search results")] == ["kb/shipping"]
    in_folder = console.http.get(f"/console/agents/{agent}/memory", params={"q": "prefers", "prefix": "users/bob/"})
    assert [hit[0] for hit in cells(in_folder.text, "Search results")] == ["users/bob/prefs"]
    nothing = console.http.get(f"/console/agents/{agent}/memory", params={"q": "zebra"})
    assert nothing.status_code == 200 and "No document holds zebra" in nothing.text


def test_a_malformed_query_is_shown_on_the_page_as_a_400(console: Console, agent: str) -> None:
    console.sign_in(console.admin)
    answer = console.http.get(f"/console/agents/{agent}/memory", params={"q": '"unclosed'})
    assert answer.status_code == 400
    assert 'role="alert"' in answer.text and "unclosed quote" in answer.text
    assert rows(answer.text) == 4  # the listing is still there


@pytest.mark.parametrize("bad", ["Users/alice/prefs", "kb//returns", "kb/%2E%2E/x", "kb/a%20b", "users/x"])
def test_bad_paths_are_a_4xx_page(console: Console, agent: str, bad: str) -> None:
    console.sign_in(console.admin)
    answer = console.http.get(f"/console/agents/{agent}/memory/{bad}")
    assert answer.status_code in (400, 404), (bad, answer.status_code)
    assert answer.headers["content-type"].startswith("text/html")


def test_an_absent_document_and_a_bad_folder_are_4xx(console: Console, agent: str) -> None:
    console.sign_in(console.admin)
    assert console.http.get(f"/console/agents/{agent}/memory/kb/none").status_code == 404
    assert console.http.get(f"/console/agents/{agent}/memory", params={"prefix": "kb/../"}).status_code == 400
    assert console.http.get(f"/console/agents/{agent}/memory/").status_code == 200  # the listing


def test_memory_is_for_admins_as_in_the_api(console: Console, agent: str) -> None:
    member = console.new_key("member")[1]
    session = console.api("POST", "/v0/sessions", member, json={"user": "alice"})
    console.api("POST", "/v0/runs", member, json={"agent": agent, "session_id": session["id"]})
    console.sign_in(member)
    for url in (
        f"/console/agents/{agent}/memory",
        f"/console/agents/{agent}/memory/kb/returns",
        f"/console/agents/{agent}/memory/users/alice/prefs",
    ):
        answer = console.http.get(url)
        assert answer.status_code == 403, url
        assert "Prefers" not in answer.text and "Returns policy" not in answer.text
    page = console.http.get(f"/console/sessions/{session['id']}")
    assert page.status_code == 200 and "Memory of user" not in page.text and "Prefers email" not in page.text
    assert "/memory" not in console.http.get("/console/agents").text


def test_a_session_page_shows_its_user_s_folder_and_no_other(console: Console, agent: str) -> None:
    admin = console.admin  # acts for every end user (a member may name only its own)
    session = console.api("POST", "/v0/sessions", admin, json={"user": "alice"})
    console.api("POST", "/v0/runs", admin, json={"agent": agent, "session_id": session["id"]})
    nobody = console.api("POST", "/v0/sessions", admin, json={})
    console.api("POST", "/v0/runs", admin, json={"agent": agent, "session_id": nobody["id"]})
    console.sign_in(console.admin)
    page = console.http.get(f"/console/sessions/{session['id']}")
    assert page.status_code == 200
    assert [row[0] for row in cells(page.text, f"Memory of user alice in {agent}")] == ["users/alice/prefs"]
    assert "users/bob" not in page.text and "kb/returns" not in page.text
    assert f"/console/agents/{agent}/memory?prefix=users%2Falice%2F" in page.text
    without = console.http.get(f"/console/sessions/{nobody['id']}")
    assert without.status_code == 200 and "Memory of user" not in without.text
    agents = console.http.get("/console/agents").text
    assert f'href="/console/agents/{agent}/memory"' in agents


def test_sizes_and_snippets_read_as_text() -> None:
    assert [views.size(n) for n in (0, 1023, 1024, 2150, 1024 * 1024 - 1, 1024 * 1024)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "2.1 KiB",
        "1.0 MiB",
        "1.0 MiB",
    ]
    assert views.snippet_parts("the **parcel** is **late**.") == [
        ("the ", False),
        ("parcel", True),
        (" is ", False),
        ("late", True),
        (".", False),
    ]
    assert views.snippet_parts("**Returns** policy") == [("Returns", True), (" policy", False)]
