"""The examples of docs/store.md, docs/sdk.md, docs/from-agentos.md and docs/http-api.md run as written, so a
doc that drifts from the code fails here.

As ``test_readme.py`` does for the README: the fenced blocks are taken from the page and ``exec``-ed, the
embedded ones in a fresh directory against a real SQLite file (and again on memory://, PostgreSQL and
Redis, the URL swapped), the SDK's against a real ``keepstate serve``
(``serverproc``) whose URL replaces the docs' ``http://127.0.0.1:8420``. A block runs when its info string
is ``python``; ``python no-run`` shows code that needs what a test does not have (a PostgreSQL URL of
your own, a worker running until Ctrl-C). The blocks of one page run in order in one namespace, like a
reader typing them into one interpreter, and each is compiled at its own line of the page, so a failure
points at the line of the doc. The examples hold their own ``assert``s: an answer that changes fails them.

The ``sh`` blocks of docs/http-api.md are ``curl`` commands, each followed by the answer it gets as a
``# `` line; they run in order in one ``bash`` against a real server (``KEEPSTATE_URL`` and an admin
``KEY`` set), and every answer must be the JSON shown, ``…`` (bare or as a string) standing for any value.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import keepstate
from backends import declaring
from keepstate.batch import Batch
from keepstate.client._sync import CallerState
from keepstate.server.openapi import DOCUMENT
from keepstate.server.state_routes import PREFIXES
from serverproc import running_server

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOCS_URL = "http://127.0.0.1:8420"
STORE_URL = "sqlite:///./state.db"
RUN, NO_RUN = "python", "python no-run"
KNOWN_INFO = {RUN, NO_RUN, "sh", "json", "text", "toml", "yaml", "http", "console", "ts", ""}
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
    return [
        Block(page, found["info"].strip(), found["code"], text.count("\n", 0, found.start("code")) + 1)
        for found in FENCE.finditer(text)
    ]


def runnable(page: Path) -> list[Block]:
    return [block for block in blocks(page) if block.info == RUN]


@pytest.mark.parametrize(
    "name", ["store.md", "sdk.md", "http-api.md", "from-agentos.md", "install.md", "troubleshooting.md"]
)
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


@pytest.mark.parametrize("backend_url", [n for n in declaring("cross_scope_batches") if n != "sqlite"], indirect=True)
def test_store_examples_run_on_the_other_stores(backend_url: str) -> None:
    """The page's promise that the rules hold on any backend, kept by its own examples (its batch spans two
    scopes, which a Redis Cluster refuses, as the page says). Redis keeps no platform records: there
    ``register_session`` answers False, as the page says, where it asserts True."""
    replace = {STORE_URL: backend_url}
    if backend_url.startswith("redis://"):
        replace["assert store.register_session("] = "assert not store.register_session("
    names: dict[str, Any] = {}
    try:
        for block in runnable(DOCS / "store.md"):
            block.run(names, replace)
    finally:
        _close_stores(names)


@pytest.mark.parametrize(("name", "least"), [("sdk.md", 5), ("from-agentos.md", 2)])
def test_sdk_examples_run(name: str, least: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's examples, and the AgentOS agent run unchanged on keepstate, against a real server."""
    monkeypatch.chdir(tmp_path)
    page = runnable(DOCS / name)
    assert len(page) >= least
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


def test_every_state_route_is_in_the_http_docs() -> None:
    """Each state route the server documents in its OpenAPI has its row in docs/http-api.md, under ``P``,
    the prefix of any of the five kinds, each of which is named there too."""
    text = (DOCS / "http-api.md").read_text()
    templates = [template for _, _, template in PREFIXES.values()]
    for template in templates:
        assert f"`{template}" in text, template
    assert "`POST /v0/state/batch`" in text and "/v0/state/batch" in DOCUMENT["paths"]
    for path, methods in DOCUMENT["paths"].items():
        prefix = next((t for t in templates if path.startswith(t)), None)
        if prefix is None:
            continue
        tail = path[len(prefix) :].rstrip("/")
        for method in methods:
            row = f"`{method.upper()} P{tail}`"
            assert row in text, f"{method.upper()} {path}: no row {row} in docs/http-api.md"


def _public(cls: type) -> list[str]:
    """The public methods of a class and of its bases of ours."""
    return [name for base in cls.__mro__[:-1] for name in vars(base) if not name.startswith("_")]


@pytest.mark.parametrize("name", ["store.md", "sdk.md"])
def test_every_scope_call_is_in_the_docs(name: str) -> None:
    """A call added to ``Scope`` or to a batch without its place in the page fails here."""
    text = (DOCS / name).read_text()
    for call in _public(keepstate.Scope):
        assert f"| `{call}(" in text, f"{name} has no row for Scope.{call}"
    for call in _public(Batch):
        assert f"`b.{call}" in text, f"{name} does not name the batch's {call}"


def test_every_caller_scope_is_in_the_sdk_docs() -> None:
    text = (DOCS / "sdk.md").read_text()
    for scope in _public(CallerState):
        assert f"`client.state.{scope}(" in text, f"sdk.md does not name client.state.{scope}"


@dataclass(frozen=True)
class Command:
    """One shell command of a page and the answer shown under it (None: not shown)."""

    text: str
    line: int
    answer: str | None


def commands(block: Block) -> list[Command]:
    """A block's commands (continued by a trailing ``\\`` or an open ``'`` string), each with its ``# `` answer."""
    found: list[Command] = []
    pending: list[str] = []
    start = 0
    for offset, line in enumerate(block.code.splitlines()):
        if not pending and line.startswith("# "):
            previous = found[-1]
            found[-1] = Command(previous.text, previous.line, (previous.answer or "") + line[2:])
            continue
        if not pending:
            start = block.line + offset
        pending.append(line)
        text = "\n".join(pending)
        if text.count("'") % 2 == 0 and not text.endswith("\\"):
            found.append(Command(text, start, None))
            pending = []
    assert not pending, f"{block.page.name}:{start}: an unfinished command"
    return found


def matches(shown: Any, got: Any) -> bool:
    """``got`` is the answer ``shown``, where ``"…"`` matches any value."""
    if shown == "…":
        return True
    if isinstance(shown, dict):
        return isinstance(got, dict) and shown.keys() == got.keys() and all(matches(shown[k], got[k]) for k in shown)
    if isinstance(shown, list):
        return isinstance(got, list) and len(shown) == len(got) and all(map(matches, shown, got))
    return bool(shown == got) and type(shown) is type(got)


def test_http_examples_answer_as_shown(tmp_path: Path) -> None:
    page = [command for block in blocks(DOCS / "http-api.md") if block.info == "sh" for command in commands(block)]
    assert sum(command.answer is not None for command in page) >= 15
    script = "set -eu -o pipefail\n" + "".join(f"{c.text}\nprintf '\\n@@{n}@@\\n'\n" for n, c in enumerate(page))
    with running_server(f"sqlite:///{tmp_path / 'server.db'}") as info:
        env = {
            **os.environ,
            "KEEPSTATE_URL": info.url,
            "KEY": info.admin_key,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        ran = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    outputs = re.split(r"\n@@\d+@@\n", ran.stdout)[:-1]
    assert len(outputs) == len(page)
    for command, output in zip(page, outputs, strict=True):
        if command.answer is not None:
            shown = json.loads(re.sub(r"(?<=[:,\[])\s*…", '"…"', command.answer))
            got = json.loads(output)
            assert matches(shown, got), f"docs/http-api.md:{command.line}: shown {shown}, got {got}"
