"""A fork's ``parent`` moves with export and import (dump format 5), SQLite → PostgreSQL, with the state it
was made with; a format 4 dump (from before ``parent``) still imports, its sessions without one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import orjson

from keepstate.clock import now_ms
from keepstate.platform import open_platform
from keepstate.stores.records import StoredSession, namespace
from keepstate.transfer import VERSION

CLI = [sys.executable, "-m", "keepstate"]


def _cli(*args: str, stdin: bytes = b"") -> bytes:
    done = subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout


async def _fork(url: str) -> None:
    platform = await open_platform(url)
    try:
        source, _ = await platform.repo.create_session(StoredSession("default", "conv-1", "k1", "ada", b"{}", now_ms()))
        assert await platform.repo.add_session_agent(source, "chat")
        await platform.state.append(namespace("default", "session", "chat", "conv-1"), "history", [b"1", b"2", b"3"])
        fork = StoredSession("default", "conv-2", "k1", "ada", b"{}", now_ms(), parent="conv-1")
        assert await platform.database.fork_session(source, fork, {("chat", "history"): 2}) is not None
    finally:
        await platform.aclose()


async def _sessions(url: str) -> tuple[list[tuple[str, str | None]], bytes | None]:
    platform = await open_platform(url)
    try:
        found = await platform.repo.list_sessions("default", None, None, 0, 10)
        history = await platform.state.get(namespace("default", "session", "chat", "conv-2"), "history")
        return [(s.id, s.parent) for s in found], None if history is None else history.data
    finally:
        await platform.aclose()


def _as_format_4(lines: list[bytes]) -> bytes:
    """The dump as the release before ``parent`` wrote it: header version 4, sessions without the column."""
    older = []
    for line in lines:
        record = orjson.loads(line)
        if record["type"] == "keepstate-export" and "end" not in record:
            record["version"] = 4
        if record.get("table") == "ks_sessions":
            record["row"].pop("parent")
        older.append(orjson.dumps(record))
    return b"\n".join(older) + b"\n"


def test_a_forks_parent_moves_with_export_and_import(tmp_path: Path, pg_url: str) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    asyncio.run(_fork(source))
    exported = _cli("export", "--store", source)
    header = orjson.loads(exported.splitlines()[0])
    assert (header["type"], header["version"]) == ("keepstate-export", VERSION) and VERSION >= 5  # parent since 5
    _cli("import", "--store", pg_url, stdin=exported)
    assert asyncio.run(_sessions(pg_url)) == ([("conv-1", None), ("conv-2", "conv-1")], b"[1,2]")
    assert _cli("export", "--store", pg_url) == exported

    older = f"sqlite:///{tmp_path / 'older.db'}"
    _cli("import", "--store", older, stdin=_as_format_4(exported.splitlines()))
    assert asyncio.run(_sessions(older)) == ([("conv-1", None), ("conv-2", None)], b"[1,2]")
