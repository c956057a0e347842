"""The console at 1,000 sessions and 10,000 runs: every page answers one page of rows, read in pages
from the store, and its cursors walk on. The app runs in this process (the same app ``keepstate
serve`` runs) over a memory store filled by the platform's own calls; what a page costs in time is
``bench/bench_console.py``'s business, not a test's.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from console_support import Seeded, in_process, next_link, rows, seed, sign_in

from keepstate.server.console import pages

SESSIONS, RUNS, MESSAGES = 1000, 10_000, 500


@pytest.fixture
async def scaled() -> AsyncIterator[tuple[httpx.AsyncClient, Seeded]]:
    async with in_process(f"memory://{uuid.uuid4().hex}") as (client, platform):
        seeded = await seed(platform, SESSIONS, RUNS, MESSAGES)
        await sign_in(client, seeded.member)
        yield client, seeded


async def test_sessions_and_runs_pages_hold_one_page_and_walk_on(scaled: tuple[httpx.AsyncClient, Seeded]) -> None:
    client, seeded = scaled
    for path in ("/console/sessions", "/console/runs"):
        first = await client.get(path)
        assert first.status_code == 200
        assert rows(first.text) == pages.PAGE
        seen = set(re.findall(r'href="/console/(?:sessions|runs)/([^"?]+)"', first.text.split("<tbody>")[1]))
        following = next_link(first.text)
        assert following is not None
        second = await client.get(following)
        assert rows(second.text) == pages.PAGE
        later = set(re.findall(r'href="/console/(?:sessions|runs)/([^"?]+)"', second.text.split("<tbody>")[1]))
        assert seen.isdisjoint(later)
    newest = await client.get("/console/runs")
    assert seeded.runs[-1] in newest.text.split("</tr>")[1]  # newest first
    assert seeded.runs[0] not in newest.text


async def test_filtered_pages_stay_paged(scaled: tuple[httpx.AsyncClient, Seeded]) -> None:
    client, _ = scaled
    held = await client.get("/console/runs", params={"status": "held"})
    assert rows(held.text) == pages.PAGE and held.text.count('data-status="held"') == pages.PAGE
    agent = await client.get("/console/runs", params={"agent": "agent-7", "status": "queued"})
    assert rows(agent.text) == pages.PAGE
    user = await client.get("/console/sessions", params={"user": "user-7"})
    assert rows(user.text) == SESSIONS // 50  # 20 sessions of each end user: one page


async def test_a_long_conversation_is_read_from_its_end(scaled: tuple[httpx.AsyncClient, Seeded]) -> None:
    client, seeded = scaled
    page = await client.get(f"/console/sessions/{seeded.conversation}")
    assert page.status_code == 200
    assert page.text.count('<li class="message"') == pages.LIST_ITEMS
    assert f"message {MESSAGES - 1}:" in page.text and f"message {MESSAGES - pages.LIST_ITEMS - 1}:" not in page.text
    earlier = re.search(r'<a href="\?([^"]+)">Earlier messages</a>', page.text)
    assert earlier is not None
    before = await client.get(f"/console/sessions/{seeded.conversation}?{earlier.group(1).replace('&amp;', '&')}")
    assert before.text.count('<li class="message"') == pages.LIST_ITEMS
    assert f"message {MESSAGES - pages.LIST_ITEMS - 1}:" in before.text
    assert f"message {MESSAGES - 1}:" not in before.text
    assert "Later messages" in before.text


async def test_agents_page_counts_in_pages(scaled: tuple[httpx.AsyncClient, Seeded]) -> None:
    client, seeded = scaled
    page = await client.get("/console/agents")
    assert page.status_code == 200
    assert rows(page.text) == 10  # agent-0 … agent-9; chat's runs are all finished and older than a page
    row = page.text.split(">agent-3</a>")[1].split("</tr>")[0]
    queued, running, held = re.findall(r"<td>(\d+\+?)</td>", row)
    assert queued.endswith("+") and 0 < int(queued[:-1]) < pages.AGENT_COUNT_CAP  # of the newest 1,000 queued
    assert (running, held) == ("0", str(len(seeded.held)))
