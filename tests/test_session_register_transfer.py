"""A session an embedded app registered survives the command line's moves and cleanups: export and
import carry its registered agents (SQLite → PostgreSQL → SQLite, losslessly), and ``keepstate
purge`` leaves them, so the copy's console shows the conversation and a delete still takes it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import orjson

import keepstate
from claimers import claimer
from keepstate.clock import now_ms
from keepstate.platform import open_platform
from keepstate.stores.records import Outcome, StoredInvocation, StoredRun, namespace

CLI = [sys.executable, "-m", "keepstate"]
HISTORY = [{"role": "user", "content": "Where is my order?"}, {"role": "assistant", "content": "On its way."}]


def _write_conversation(url: str) -> None:
    with keepstate.open(url) as store:
        assert store.register_session("conv-7", "chat", user="ada", metadata={"channel": "web"}, owner="key_m1")
        store.scope("session", agent="chat", id="conv-7").append("history", HISTORY)


def _cli(*args: str, stdin: Path | None = None, stdout: Path | None = None) -> str:
    """Run the command line (its input, its output from or to a file when given); what it said."""
    with ExitStack() as files:
        given = files.enter_context(stdin.open("rb")) if stdin else subprocess.DEVNULL
        out = files.enter_context(stdout.open("wb")) if stdout else subprocess.PIPE
        done = subprocess.run([*CLI, *args], stdin=given, stdout=out, stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stderr.decode() + (done.stdout or b"").decode()


def _export(url: str, path: Path) -> list[bytes]:
    _cli("export", "--store", url, stdout=path)
    return path.read_bytes().splitlines()


async def _agents_then_delete(url: str) -> tuple[list[str], list[str] | None, bytes | None]:
    platform = await open_platform(url)
    try:
        agents = await platform.repo.session_agents("default", "conv-7")
        deleted = await platform.database.delete_session("default", "conv-7", now_ms())
        left = await platform.state.get(namespace("default", "session", "chat", "conv-7"), "history")
        return agents, deleted, None if left is None else left.data
    finally:
        await platform.aclose()


def test_export_and_import_carry_registered_agents_losslessly(tmp_path: Path, pg_url: str) -> None:
    first, last = f"sqlite:///{tmp_path / 'first.db'}", f"sqlite:///{tmp_path / 'last.db'}"
    _write_conversation(first)
    original = _export(first, tmp_path / "one.jsonl")
    _cli("import", "--store", pg_url, stdin=tmp_path / "one.jsonl")
    via_pg = _export(pg_url, tmp_path / "two.jsonl")
    _cli("import", "--store", last, stdin=tmp_path / "two.jsonl")
    final = _export(last, tmp_path / "three.jsonl")

    assert sorted(original) == sorted(via_pg) == sorted(final)
    rows = [orjson.loads(line) for line in original]
    registered = [row["row"] for row in rows if row.get("table") == "ks_session_agents"]
    assert registered == [{"env": "default", "session_id": "conv-7", "agent": "chat"}]
    with keepstate.open(last) as store:
        assert store.scope("session", agent="chat", id="conv-7").get("history") == HISTORY
    agents, deleted, left = asyncio.run(_agents_then_delete(last))
    assert agents == ["chat"] and deleted == ["chat"] and left is None


async def _finish_a_run(url: str) -> None:
    platform = await open_platform(url)
    try:
        repo, now = platform.repo, now_ms()
        run = StoredRun("default", "run-1", "worker", "key_m1", "conv-7", "ada", None, "queued", b"{}", now, now)
        invocation = StoredInvocation("inv-1", "default", run.id, "worker", "start", "queued", now)
        await repo.start_run(run, "key_m1", invocation)
        worker = await claimer(repo, "default")
        claimed = await repo.claim("default", ["worker"], "tok", now_ms() + 30_000, now_ms(), worker)
        assert claimed is not None
        await repo.finish(claimed.invocation.id, "tok", Outcome("complete", b"1"), now_ms())
    finally:
        await platform.aclose()


def test_purge_leaves_the_agents_of_a_session(tmp_path: Path) -> None:
    """The registered agent and the agent of the purged run both stay the session's, so its delete
    still drops both agents' state."""
    url = f"sqlite:///{tmp_path / 'kept.db'}"
    _write_conversation(url)
    asyncio.run(_finish_a_run(url))
    assert "purged 1 finished run" in _cli("purge", "--store", url, "--older-than", "0")
    agents, deleted, left = asyncio.run(_agents_then_delete(url))
    assert agents == ["chat", "worker"] and deleted == ["chat", "worker"] and left is None
