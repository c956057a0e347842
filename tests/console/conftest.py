"""Fixtures of the console suite: a real ``keepstate serve``, real workers, a real headless Chromium.

The browser is Debian's ``chromium`` driven by Playwright's Python package (``executable_path``; never
``playwright install``). Without it the browser tests skip with one line, and fail instead under
``KEEPSTATE_REQUIRE_SERVICES=1`` (CI, whose ``.ci/run`` installs it). One browser per module; each
test opens its own contexts (a context is a fresh cookie jar: one signed-in person).

The server runs over ``memory://`` (``KEEPSTATE_CONSOLE_TEST_STORE`` to choose another): the platform's
rules are the same on every store, and the console only talks to the platform.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from console_support import Console

from keepstate.client import Worker
from serverproc import ServerInfo, running_server

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STORE_URL = os.environ.get("KEEPSTATE_CONSOLE_TEST_STORE", "memory://")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"


def chromium_path() -> str:
    """Debian's chromium; skip (or fail under KEEPSTATE_REQUIRE_SERVICES=1) when it is not installed."""
    found = shutil.which("chromium")
    if found is not None:
        return found
    message = "chromium is not installed (apt-get install chromium): skipping the console's browser tests"
    if os.environ.get("KEEPSTATE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{message}, and KEEPSTATE_REQUIRE_SERVICES=1")
    pytest.skip(message)


@pytest.fixture(scope="module")
def console_server() -> Iterator[ServerInfo]:
    with running_server(STORE_URL, lease=5) as info:
        yield info


@pytest.fixture(scope="module")
def keys(console_server: ServerInfo) -> Iterator[dict[str, str]]:
    """Secrets of a module's people: two members (named A and B) and a worker; the admin is the server's."""
    console = Console(console_server.url, console_server.admin_key)
    made = {
        "memberA": console.new_key("member", "A")[1],
        "memberB": console.new_key("member", "B")[1],
        "worker": console.new_key("worker", "workers")[1],
        "admin": console_server.admin_key,
    }
    yield made
    console.close()


@pytest.fixture
def console(console_server: ServerInfo) -> Iterator[Console]:
    client = Console(console_server.url, console_server.admin_key)
    yield client
    client.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tests' screenshots go: ``docs/console/`` with KEEPSTATE_SCREENSHOTS=1 (``make screenshots``),
    else a temporary folder (so a test run leaves the committed pictures alone)."""
    if os.environ.get("KEEPSTATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def background() -> Iterator[Callable[[Worker], None]]:
    """Runs SDK workers in threads; stops and joins them when the test ends."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(worker: Worker) -> None:
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))

    yield start
    for worker, _ in started:
        worker.stop()
    for _, thread in started:
        thread.join(15)
        assert not thread.is_alive(), "a worker did not stop"
