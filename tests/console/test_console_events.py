"""A run's events on its console page, in a real headless Chromium against a real ``keepstate serve``.

An SDK worker emits (``inv.emit``, ``inv.emit_many``) while the page is open, each step when the test
lets it: the events come in as rows in ``seq`` order without a reload, the run's status follows its
``run.status`` events, and its output shows when it ends. Where the test must place a write exactly
(around a cut connection, a long log) it plays the worker through the HTTP API. A connection cut
under the page (a proxy between the browser and the server drops it) is picked up again by the
browser's EventSource from its ``Last-Event-ID``: every event once, in order. Over plain HTTP: the
stream is the console's cookie's (401 without it, the API's 404 for another member's run), resumes
after ``Last-Event-ID`` and says 204 once a run's log is over. Live updates are waited for up to
``LIVE_S`` ms (a bound against a hang on a shared machine, not a measure of speed).
"""

from __future__ import annotations

import dataclasses
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from console_support import Console, CuttableProxy, bearer
from playwright.sync_api import Browser, Page, Request, expect
from test_console_browser import shoot, signed_in

from keepstate.client import Invocation, Worker
from serverproc import ServerInfo

LIVE_S = 15_000
GATE_S = 60.0
"""How long the test's worker waits for the test to let it go on (a bound against a hang)."""
RUN_TOKEN = "x-agentos-run-token"


@dataclasses.dataclass
class Played:
    """A run the test works as its worker would, through the API."""

    console: Console
    worker_key: str
    run: str
    invocation: str = ""
    token: str = ""

    def claim(self, agent: str) -> None:
        claimed = self.console.api(
            "POST", "/v0/invocations/claim", self.worker_key, json={"agents": [agent], "wait": 10}
        )
        assert claimed["run_id"] == self.run
        self.invocation, self.token = claimed["id"], claimed["token"]

    def emit(self, *data: Any, type: str = "token") -> int:
        body = {"events": [{"type": type, "data": one} for one in data]}
        answer = self.console.http.post(f"/v0/invocations/{self.invocation}/events", json=body, headers=self.headers)
        assert answer.status_code == 200, answer.text
        seq: int = answer.json()["seq"]
        return seq

    def complete(self, output: Any) -> None:
        answer = self.console.http.post(
            f"/v0/invocations/{self.invocation}/complete", json={"output": output}, headers=self.headers
        )
        assert answer.status_code == 200, answer.text

    @property
    def headers(self) -> dict[str, str]:
        return {RUN_TOKEN: self.token}


def started(console: Console, keys: dict[str, str], agent: str) -> Played:
    run = console.api("POST", "/v0/runs", keys["memberA"], json={"agent": agent, "input": {"message": "Say hello"}})
    return Played(console, keys["worker"], run["id"])


def event_rows(page: Page) -> Any:
    return page.get_by_role("table", name="Events").locator("tbody tr")


def seqs(page: Page) -> list[int]:
    return [int(seq) for seq in event_rows(page).evaluate_all("rows => rows.map((row) => row.dataset.seq)")]


class Narrator:
    """An agent that emits a reply as tokens and a tool call, each step once the test opens its gate."""

    def __init__(self) -> None:
        self.speak, self.finish = threading.Event(), threading.Event()

    def __call__(self, inv: Invocation) -> Any:
        assert self.speak.wait(GATE_S)
        inv.emit("Hel", type="token")
        inv.emit("lo", type="token")
        inv.emit_many([{"type": "token", "data": " wor"}, {"type": "token", "data": "ld"}])
        inv.emit({"tool": "lookup", "args": {"order": 1042}}, type="tool.call")
        assert self.finish.wait(GATE_S)
        return {"reply": "Hello world"}


def test_a_workers_events_come_in_live_and_the_status_follows_them_without_a_reload(
    browser: Browser,
    console_server: ServerInfo,
    keys: dict[str, str],
    console: Console,
    background: Callable[[Worker], None],
    screenshot_dir: Path,
) -> None:
    agent = f"narrator-{uuid.uuid4().hex[:6]}"
    run = started(console, keys, agent).run
    page = signed_in(browser, console_server, keys["memberA"])
    page.goto(f"/console/runs/{run}")
    status = page.locator("dd [data-status]")
    expect(status).to_have_text("queued")
    expect(event_rows(page)).to_have_count(1)
    expect(event_rows(page).first).to_contain_text("run.status")
    page.evaluate("window.__same_page = true")

    narrator = Narrator()
    worker = Worker(console_server.url, keys["worker"], claim_wait=1)
    worker.agent(agent)(narrator)
    background(worker)  # claims the run: running
    expect(status).to_have_text("running", timeout=LIVE_S)
    narrator.speak.set()
    expect(event_rows(page)).to_have_count(7, timeout=LIVE_S)
    cells = [event_rows(page).nth(n).locator("td") for n in range(7)]
    assert [row.nth(1).inner_text() for row in cells] == ["run.status", "run.status"] + ["token"] * 4 + ["tool.call"]
    assert [row.nth(2).inner_text() for row in cells[2:6]] == ['"Hel"', '"lo"', '" wor"', '"ld"']
    expect(cells[6].nth(2)).to_contain_text('"order": 1042')
    expect(cells[6].nth(3).locator("time")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
    expect(status).to_have_text("running")
    shoot(page, screenshot_dir, "run-events")

    narrator.finish.set()
    expect(status).to_have_text("done", timeout=LIVE_S)
    expect(event_rows(page)).to_have_count(9, timeout=LIVE_S)
    expect(event_rows(page).nth(7).locator("td").nth(1)).to_have_text("run.output")
    expect(event_rows(page).nth(8).locator("td").nth(2)).to_contain_text('"status": "done"')
    expect(page.get_by_role("region", name="Output", exact=True)).to_contain_text('"reply": "Hello world"')
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
    assert seqs(page) == list(range(1, 10))
    assert page.evaluate("window.__same_page") is True  # all of it in place, never reloaded
    page.reload()  # and a fresh page shows the same log
    assert seqs(page) == list(range(1, 10))
    page.context.close()


@pytest.fixture
def proxy(console_server: ServerInfo) -> Iterator[CuttableProxy]:
    forwarder = CuttableProxy(console_server.url)
    yield forwarder
    forwarder.close()


def test_a_dropped_connection_resumes_after_the_last_event_seen_with_none_twice(
    browser: Browser, console_server: ServerInfo, keys: dict[str, str], console: Console, proxy: CuttableProxy
) -> None:
    agent = f"resumer-{uuid.uuid4().hex[:6]}"
    played = started(console, keys, agent)
    played.claim(agent)
    page = signed_in(browser, dataclasses.replace(console_server, url=proxy.url), keys["memberA"])
    streams: list[Request] = []
    page.on("request", lambda request: streams.append(request) if "/events" in request.url else None)
    page.goto(f"/console/runs/{played.run}")
    expect(page.locator("dd [data-status]")).to_have_text("running")
    played.emit("one", "two")
    expect(event_rows(page)).to_have_count(4, timeout=LIVE_S)
    assert len(streams) == 1 and streams[0].header_value("last-event-id") is None

    proxy.cut()  # the stream and every other connection of the page, gone at once
    played.emit("three")  # written while the page is cut off
    played.emit("four")
    expect(event_rows(page)).to_have_count(6, timeout=LIVE_S)
    assert seqs(page) == [1, 2, 3, 4, 5, 6]
    assert [request.header_value("last-event-id") for request in streams[1:2]] == ["4"]
    played.complete({"ok": True})
    expect(page.locator("dd [data-status]")).to_have_text("done", timeout=LIVE_S)
    expect(event_rows(page)).to_have_count(8, timeout=LIVE_S)
    assert seqs(page) == list(range(1, 9))
    page.context.close()


# ---------------------------------------------------------------- over HTTP


def read_stream(http: httpx.Client, path: str, count: int, headers: dict[str, str] | None = None) -> list[Any]:
    """The first ``count`` messages of a console stream, as ``(id, event)``; the stream is then closed."""
    found: list[Any] = []
    with http.stream("GET", path, headers={"Accept": "text/event-stream", **(headers or {})}) as answer:
        assert answer.status_code == 200, answer.read()
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert answer.headers["cache-control"] == "no-store"
        fields: dict[str, str] = {}
        for line in answer.iter_lines():
            if line.startswith(":"):
                continue
            if line:
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
                continue
            if "data" in fields:
                found.append((int(fields["id"]), orjson.loads(fields["data"])))
                if len(found) == count:
                    break
            fields = {}
    return found


def test_the_console_stream_is_the_cookies_and_resumes_after_last_event_id(
    console: Console, keys: dict[str, str]
) -> None:
    agent = f"plain-{uuid.uuid4().hex[:6]}"
    played = started(console, keys, agent)
    played.claim(agent)
    played.emit("a", "b", "c")
    path = f"/console/runs/{played.run}/events"
    refused = console.http.get(path, headers={"Accept": "text/event-stream"})
    assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"

    console.sign_in(keys["memberB"])
    assert console.http.get(path).status_code == 404  # another member's run: the API's 404
    console.http.cookies.clear()
    console.sign_in(keys["memberA"])
    first = read_stream(console.http, path, 5)
    assert [seq for seq, _ in first] == [1, 2, 3, 4, 5]
    assert [event["type"] for _, event in first] == ["run.status", "run.status", "token", "token", "token"]
    assert first[2][1]["data"] == "a" and first[2][1]["seq"] == 3
    resumed = read_stream(console.http, f"{path}?after=1", 2, {"Last-Event-ID": "3"})
    assert [(seq, event["data"]) for seq, event in resumed] == [(4, "b"), (5, "c")]
    played.complete({"ok": True})
    ending = read_stream(console.http, f"{path}?after=5", 2)
    assert [event["type"] for _, event in ending] == ["run.output", "run.status"]
    assert console.http.get(path, headers={"Last-Event-ID": "7"}).status_code == 204  # over: stop asking
    bad = console.http.get(path, headers={"Last-Event-ID": "x"})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_request"


def test_a_stream_ends_when_its_key_is_revoked_and_a_head_is_no_stream(console: Console, keys: dict[str, str]) -> None:
    key_id, member = console.new_key("member", "short-lived")
    agent = f"revoked-{uuid.uuid4().hex[:6]}"
    run = console.api("POST", "/v0/runs", member, json={"agent": agent})
    played = Played(console, keys["worker"], run["id"])
    played.claim(agent)
    console.sign_in(member)
    path = f"/console/runs/{played.run}/events"
    head = console.http.head(path)
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/event-stream")
    seen: list[int] = []
    with console.http.stream("GET", path, headers={"Accept": "text/event-stream"}) as answer:
        for line in answer.iter_lines():
            if line.startswith("id:"):
                seen.append(int(line[3:]))
                if seen == [1, 2]:  # queued, running: now the key goes, then an event comes
                    assert console.http.delete(f"/v0/keys/{key_id}", headers=bearer(console.admin)).status_code == 204
                    played.emit("after the revocation")
    assert seen == [1, 2]  # the stream ended without sending it
    assert console.http.get(path).status_code == 401


def shown_seqs(html: str) -> list[int]:
    return [int(seq) for seq in re.findall(r'<tr data-seq="(\d+)">', html)]


def test_a_long_log_opens_on_its_last_page_and_pages_back(console: Console, keys: dict[str, str]) -> None:
    agent = f"chatty-{uuid.uuid4().hex[:6]}"
    played = started(console, keys, agent)
    played.claim(agent)
    for start in range(0, 250, 100):
        played.emit(*range(start, min(start + 100, 250)))  # seqs 3 … 252, after queued and running
    console.sign_in(keys["memberA"])
    page = console.http.get(f"/console/runs/{played.run}").text
    assert shown_seqs(page) == list(range(153, 253))
    assert 'data-after="252"' in page and f"/console/runs/{played.run}/events?after=252" in page  # followed
    earlier = re.search(r'<a href="\?events_after=(\d+)">Earlier events</a>', page)
    assert earlier is not None and earlier.group(1) == "52"
    page = console.http.get(f"/console/runs/{played.run}?events_after=52").text
    assert shown_seqs(page) == list(range(53, 153))
    assert "data-events=" not in page  # not the end of the log: nothing to follow here
    assert re.search(r'<a href="\?events_after=152" rel="next">Later events</a>', page)
    assert shown_seqs(console.http.get(f"/console/runs/{played.run}?events_after=0").text) == list(range(1, 101))
    played.complete({"ok": True})
    page = console.http.get(f"/console/runs/{played.run}").text
    assert shown_seqs(page) == list(range(155, 255))  # ended: run.output and run.status done came last
    assert "data-events=" not in page  # a final run: no stream
    bad = console.http.get(f"/console/runs/{played.run}?events_after=-1")
    assert bad.status_code == 400
