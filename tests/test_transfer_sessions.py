"""Session-store records move with export/import: served sessions, embedded ones, retained tokens,
versions, expiries (expired ones too) and suspended expiry; SQLite → PostgreSQL → SQLite, and Redis."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import orjson

from keepstate.clock import now_ms
from keepstate.sessions import SessionState, open_session_store, open_token_store
from keepstate.sessions.tokens import new_key
from serverproc import running_server

CLI = [sys.executable, "-m", "keepstate"]
TOKEN_KEY = new_key()
DAY_MS = 86_400_000
BASE = "/v0/session-stores/booking/sessions"


def _export(url: str) -> list[bytes]:
    done = subprocess.run([*CLI, "export", "--store", url], capture_output=True, check=True, timeout=120)
    return done.stdout.splitlines()


def _import(url: str, lines: list[bytes]) -> subprocess.CompletedProcess[bytes]:
    dump = b"\n".join(lines) + b"\n"
    return subprocess.run([*CLI, "import", "--store", url], input=dump, capture_output=True, timeout=120)


def _serve_sessions(url: str) -> tuple[str, int]:
    """Sessions written through a server (one rewritten, one expired long ago); the admin key."""
    with running_server(url) as info, httpx.Client(base_url=info.url, headers=_bearer(info.admin_key)) as http:
        assert http.put(f"{BASE}/s1", json={"state": {"step": 1}}).status_code == 200
        assert http.put(f"{BASE}/s1", json={"state": {"step": 2, "é": [1.5, None]}}).json() == {"version": 2}
        assert http.put(f"{BASE}/old", json={"state": {}, "expires_at": now_ms() - 3 * DAY_MS}).status_code == 200
        fence = http.post(f"{BASE}/s1/lease", json={"ttl_ms": 60_000}).json()["fence"]  # held at export time
        return info.admin_key, int(fence)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _embedded(url: str) -> None:
    """A session and a retained token written by Python in-process, one executing (expiry suspended)."""
    async with open_session_store(url) as store:
        await store.set("py-1", SessionState(state={"n": 7}, expires_at=now_ms() + DAY_MS))
        await store.set("py-busy", SessionState(phase="executing", effect={"name": "pay"}, expires_at=1))
    tokens = open_token_store(url, keys=[TOKEN_KEY])
    await tokens.put("py-1", "secret-token-1")
    await tokens.aclose()


def test_session_records_round_trip_sqlite_postgres_sqlite(tmp_path: Path, pg_url: str) -> None:
    first, last = f"sqlite:///{tmp_path / 'first.db'}", f"sqlite:///{tmp_path / 'last.db'}"
    admin, old_fence = _serve_sessions(first)
    asyncio.run(_embedded(first))
    original = _export(first)
    sessions = [orjson.loads(line) for line in original if orjson.loads(line)["type"] == "session"]
    assert sorted((s["space"], s["id"].rsplit("/", 1)[-1]) for s in sessions) == [
        ("sessions", "old"),
        ("sessions", "py-1"),
        ("sessions", "py-busy"),
        ("sessions", "s1"),
        ("tokens", "py-1"),
    ]
    assert not any(b"secret-token-1" in line for line in original), "a retained token leaked in clear"
    assert _import(pg_url, original).returncode == 0
    via_pg = _export(pg_url)
    assert _import(last, via_pg).returncode == 0
    assert sorted(original) == sorted(via_pg) == sorted(_export(last))

    with running_server(last, admin_key=admin) as info, httpx.Client(base_url=info.url, headers=_bearer(admin)) as http:
        assert http.get(f"{BASE}/s1").json() == {
            "state": {"step": 2, "é": [1.5, None]},
            "version": 2,
            "expires_at": None,
        }
        assert http.get(f"{BASE}/old").status_code == 200  # expired, kept until the purge
        lease = http.post(f"{BASE}/s1/lease", json={"ttl_ms": 1000})  # the old store's lease did not move
        assert lease.status_code == 200 and lease.json()["fence"] > old_fence
        assert http.put(f"{BASE}/s1", json={"state": {}, "fence": old_fence}).json()["error"] == "lease_lost"
        assert http.put(f"{BASE}/s1", json={"state": {"step": 3}}).json() == {"version": 3}

    async def check_embedded() -> None:
        async with open_session_store(last) as store:
            kept = await store.get("py-1")
            busy = await store.get("py-busy")
            assert kept is not None and kept.state == {"n": 7}
            assert busy is not None and busy.phase == "executing"  # its expiry is still suspended
        tokens = open_token_store(last, keys=[TOKEN_KEY])
        assert await tokens.get("py-1") == "secret-token-1"
        await tokens.aclose()

    asyncio.run(check_embedded())


def test_session_records_move_into_redis(tmp_path: Path, redis_url: str) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    asyncio.run(_embedded(source))
    assert _import(redis_url, [line for line in _export(source) if b'"type":"row"' not in line]).returncode == 0

    async def check() -> None:
        async with open_session_store(redis_url) as store:
            kept = await store.get("py-1")
            assert kept is not None and kept.state == {"n": 7}

    asyncio.run(check())
    moved = [line for line in _export(redis_url) if b'"type":"session"' in line]
    assert len(moved) == 3 and sorted(moved) == sorted(line for line in _export(source) if b'"type":"session"' in line)


def test_a_bad_session_line_is_refused_with_its_line_and_nothing_is_written(tmp_path: Path) -> None:
    header = orjson.dumps({"type": "keepstate-export", "version": 4, "platform": True})
    good = {"type": "session", "space": "sessions", "id": "e/app/s", "version": 1, "expires_at": None, "pinned": False}
    for n, (bad, why) in enumerate(
        (
            ({**good, "data": "WzFd"}, b"JSON object"),  # [1]
            ({**good, "space": "elsewhere", "data": "e30="}, b"space"),
            ({**good, "id": "a/b", "data": "e30="}, b"env/space/id"),
            ({**good, "version": 0, "data": "e30="}, b"version"),
            ({**good, "data": "not base64!"}, b"base64"),
        )
    ):
        lines = [header, orjson.dumps({**good, "data": "e30="}), orjson.dumps(bad)]  # a good line first
        lines.append(orjson.dumps({"type": "keepstate-export", "end": True, "records": 2}))
        target = tmp_path / f"bad-{n}.db"
        done = _import(f"sqlite:///{target}", lines)
        assert done.returncode != 0 and b"line 3" in done.stderr and why in done.stderr, done.stderr
        assert b"Traceback" not in done.stderr and not target.exists()
