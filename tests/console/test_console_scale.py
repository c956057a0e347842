"""The console at 1,000 sessions and 10,000 runs: every page answers one page of rows, read in pages
from the store, and its cursors walk on. The app runs in this process (the same app ``keepstate
serve`` runs) over a memory store filled by the platform's own calls; what a page costs in time is
``bench/bench_console.py``'s business, not a test's.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from unittest.mock import ANY

import httpx
import pytest
from console_support import HELD_EVENTS, Seeded, in_process, next_link, rows, seed, sign_in, tbody

from keepstate.server.console import pages, state_pages, waiting

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
        seen = set(re.findall(r'href="/console/(?:sessions|runs)/([^"?]+)"', tbody(first.text)))
        following = next_link(first.text)
        assert following is not None
        second = await client.get(following)
        assert rows(second.text) == pages.PAGE
        later = set(re.findall(r'href="/console/(?:sessions|runs)/([^"?]+)"', tbody(second.text)))
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
    assert page.text.count('<li class="message"') == state_pages.LIST_ITEMS
    assert (
        f"message {MESSAGES - 1}:" in page.text and f"message {MESSAGES - state_pages.LIST_ITEMS - 1}:" not in page.text
    )
    earlier = re.search(r'<a href="\?([^"]+)">Earlier messages</a>', page.text)
    assert earlier is not None
    before = await client.get(f"/console/sessions/{seeded.conversation}?{earlier.group(1).replace('&amp;', '&')}")
    assert before.text.count('<li class="message"') == state_pages.LIST_ITEMS
    assert f"message {MESSAGES - state_pages.LIST_ITEMS - 1}:" in before.text
    assert f"message {MESSAGES - 1}:" not in before.text
    assert "Later messages" in before.text


async def test_agents_page_counts_every_run_from_the_store(scaled: tuple[httpx.AsyncClient, Seeded]) -> None:
    """The counts are ``GET /v0/agents``': every run of the environment, counted in the store."""
    client, seeded = scaled
    page = await client.get("/console/agents")
    assert page.status_code == 200
    assert rows(page.text) == 11  # agent-0 … agent-9, and chat, whose runs are all finished
    api = await client.get("/v0/agents", headers={"Authorization": f"Bearer {seeded.admin}"})
    for agent in api.json()["agents"]:
        row = page.text.split(f">{agent['name']}</a>")[1].split("</tr>")[0]
        counts = re.findall(r"<td>(\d+)</td>", row)
        assert counts == [str(agent["queued"]), str(agent["running"]), str(agent["held"])]
    agent_3 = next(agent for agent in api.json()["agents"] if agent["name"] == "agent-3")
    assert agent_3["held"] == len(seeded.held) and agent_3["queued"] > pages.PAGE


async def test_waiting_for_you_pages_the_held_runs_and_the_header_counts_them(
    scaled: tuple[httpx.AsyncClient, Seeded],
) -> None:
    """200 held runs of 10,000: a page of 50, newest first, walking on; the header and the poll say 99+."""
    client, seeded = scaled
    first = await client.get("/console/waiting")
    assert first.status_code == 200 and first.text.count('<article class="held"') == waiting.PAGE
    shown = re.findall(r'<article class="held" data-key="([^"]+)"', first.text)
    assert shown == list(reversed(seeded.held))[: waiting.PAGE]  # newest first
    assert 'data-waiting="99+"' in first.text
    following = next_link(first.text)
    assert following is not None
    second = await client.get(following)
    assert re.findall(r'<article class="held" data-key="([^"]+)"', second.text)[0] == seeded.held[-waiting.PAGE - 1]
    poll = await client.get("/console/runs/status", params={"ids": seeded.held[0]})
    assert poll.json() == {"runs": {seeded.held[0]: {"status": "held", "updated_at": ANY}}, "waiting": "99+"}


async def test_a_run_with_a_long_log_shows_its_last_events(scaled: tuple[httpx.AsyncClient, Seeded]) -> None:
    """The first held run emitted 1,000 events: its page holds the last page of them, its status events
    included, and none from before that page."""
    client, seeded = scaled
    page = await client.get(f"/console/runs/{seeded.held[0]}")
    assert page.status_code == 200
    seqs = [int(seq) for seq in re.findall(r'<tr data-seq="(\d+)">', page.text)]
    assert len(seqs) == 100 and seqs == sorted(seqs)
    assert seqs[-1] == HELD_EVENTS + 3  # queued, running, 1,000 tokens, held
    assert "word 999 " in page.text and "word 900 " not in page.text
