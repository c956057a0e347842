"""The Python examples of docs/store.md and docs/sdk.md run as written, so a doc that drifts from the code
fails here.

As ``test_readme.py`` does for the README: the fenced blocks are taken from the page and ``exec``-ed, the
embedded ones in a fresh directory against a real SQLite file, the SDK's against a real ``keepstate serve``
(``serverproc``) whose URL replaces the docs' ``http://127.0.0.1:8420``. A block runs when its info string
is ``python``; ``python no-run`` shows code that needs what a test does not have (a PostgreSQL URL of
your own, a worker running until Ctrl-C). The blocks of one page run in order in one namespace, like a
reader typing them into one interpreter, and each is compiled at its own line of the page, so a failure
points at the line of the doc. The examples hold their own ``assert``s: an answer that changes fails them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import keepstate
from serverproc import running_server

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOCS_URL = "http://127.0.0.1:8420"
RUN, NO_RUN = "python", "python no-run"
KNOWN_INFO = {RUN, NO_RUN, "sh", "json", "text", "toml", "yaml", "http", "console", ""}
FENCE = re.compile(r"^```(?P<info>[^`\n]*)\n(?P<code>.*?)^```\s*$", flags=re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its info string, its code and the page line its code starts on."""

    page: Path
    info: str
    code: str
    line: int

    def run(self, names: dict[str, Any], replace: dict[str, str] | None = None) -> None:
        code = self.code
        for old, new in (replace or {}).items():
            code = code.replace(old, new)
        padded = "\n" * (self.line - 1) + code  # tracebacks name the page's own line numbers
        exec(compile(padded, str(self.page.relative_to(DOCS.parent)), "exec"), names)


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a Markdown page, in order."""
    text = page.read_text()
    return [Block(page, found["info"].strip(), found["code"], text.count("\n", 0, found.start("code")) + 1)
            for found in FENCE.finditer(text)]


def runnable(page: Path) -> list[Block]:
    return [block for block in blocks(page) if block.info == RUN]


@pytest.mark.parametrize("name", ["store.md", "sdk.md"])
def test_every_block_says_what_it_is(name: str) -> None:
    """A misspelt info string (``pyhton``) would quietly leave an example untested."""
    found = blocks(DOCS / name)
    assert found, f"{name} has no code blocks"
    assert {block.info for block in found} <= KNOWN_INFO, [b.info for b in found if b.info not in KNOWN_INFO]


def test_store_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    page = runnable(DOCS / "store.md")
    assert len(page) >= 8
    names: dict[str, Any] = {}
    try:
        for block in page:
            block.run(names)
    finally:
        _close_stores(names)
    assert (tmp_path / "state.db").exists()


def test_sdk_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    page = runnable(DOCS / "sdk.md")
    assert len(page) >= 5
    with running_server(f"sqlite:///{tmp_path / 'server.db'}") as info, _keys(info.url, info.admin_key) as names:
        try:
            with _serving(names) as serve:
                for block in page:
                    block.run(names, {DOCS_URL: info.url})
                    serve()
        finally:
            _close_stores(names)


@contextmanager
def _keys(url: str, admin_key: str) -> Iterator[dict[str, Any]]:
    """The names the SDK examples take as given: a key of each role."""
    with keepstate.Client(url, key=admin_key) as admin:
        keys = {f"{role.upper()}_KEY": admin.keys.create(role).key for role in ("member", "worker")}
        yield {"ADMIN_KEY": admin_key, **keys}


@contextmanager
def _serving(names: dict[str, Any]) -> Iterator[Any]:
    """Once a block has defined ``worker``, it serves in a thread (``poll_once``) for the blocks after it,
    as it would in its own process; stopped at the end."""
    done = threading.Event()
    threads: list[threading.Thread] = []

    def loop(worker: keepstate.Worker) -> None:
        while not done.is_set():
            worker.poll_once(wait=0.5)

    def serve() -> None:
        worker = names.get("worker")
        if isinstance(worker, keepstate.Worker) and not threads:
            threads.append(threading.Thread(target=loop, args=(worker,), daemon=True))
            threads[0].start()

    try:
        yield serve
    finally:
        done.set()
        for thread in threads:
            thread.join()
        if isinstance(names.get("worker"), keepstate.Worker):
            names["worker"].close()


def _close_stores(names: dict[str, Any]) -> None:
    """Close what the examples opened and left open (a closed store or client closes again harmlessly)."""
    for value in names.values():
        if isinstance(value, keepstate.Store | keepstate.Client):
            value.close()
