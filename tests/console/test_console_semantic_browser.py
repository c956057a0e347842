"""Search by meaning on the console's memory page, in a real headless Chromium.

An embedded app writes an agent's memory with an embedder (``meaning:concepts``, tests/meaning.py),
then ``keepstate serve --embedder`` with the same one serves the file: the page offers a switch
between words, meaning and both, and finds the note that shares no word with the question.
"""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Browser, expect
from test_console_browser import shoot, signed_in

import keepstate
import meaning
from serverproc import running_server

AGENT = "travel-desk"
TESTS = Path(__file__).resolve().parent.parent
NOTES = {
    "kb/weather": "Weather\nThe trip was called off because of the storm.",
    "kb/meals": "Meals\nVegetarian dinner on every route.",
    "kb/bags": "Bags\nOne cabin bag and one checked bag.",
}


def test_an_admin_switches_between_words_and_meaning(browser: Browser, tmp_path: Path, screenshot_dir: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with keepstate.open(url, embedder=meaning.concepts) as store:
        for path, text in NOTES.items():
            store.memory(AGENT).write(path, text)
    env = {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    with running_server(url, extra_env=env, extra_args=("--embedder", "meaning:concepts")) as server:
        page = signed_in(browser, server, server.admin_key)
        page.goto(f"{server.url}/console/agents/{AGENT}/memory")
        modes = page.get_by_role("group", name="Search by")
        expect(modes.get_by_label("Words and meaning")).to_be_checked()
        results = page.get_by_role("table", name="Search results")

        page.get_by_label("Search memory").fill("flight cancelled")
        modes.get_by_label("Words", exact=True).check()
        page.get_by_role("button", name="Search").click()
        expect(results).to_contain_text("No document holds flight cancelled")

        page.get_by_role("group", name="Search by").get_by_label("Meaning", exact=True).check()
        page.get_by_role("button", name="Search").click()
        expect(results.locator("tbody tr")).to_have_count(3)
        expect(results.locator("tbody tr").first).to_contain_text("kb/weather")
        expect(results.locator("tbody tr").first).to_contain_text("The trip was called off because of the storm.")
        expect(page.get_by_role("group", name="Search by").get_by_label("Meaning", exact=True)).to_be_checked()
        shoot(page, screenshot_dir, "memory-semantic")

        page.get_by_role("group", name="Search by").get_by_label("Words and meaning").check()
        page.get_by_role("button", name="Search").click()
        expect(results.locator("tbody tr").first).to_contain_text("kb/weather")
        page.context.close()


def test_without_an_embedder_there_is_no_switch(browser: Browser, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    with keepstate.open(url) as store:
        store.memory(AGENT).write("kb/weather", NOTES["kb/weather"])
    with running_server(url) as server:
        page = signed_in(browser, server, server.admin_key)
        page.goto(f"{server.url}/console/agents/{AGENT}/memory?q=storm&mode=semantic")
        expect(page.get_by_role("alert")).to_contain_text("no embedder")
        expect(page.get_by_role("group", name="Search by")).to_have_count(0)
        page.goto(f"{server.url}/console/agents/{AGENT}/memory?q=storm")
        expect(page.get_by_role("table", name="Search results")).to_contain_text("kb/weather")
        page.context.close()
