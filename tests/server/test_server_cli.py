"""``keepstate serve`` bootstrap and shutdown, and ``keepstate keys create``, as real processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from serverproc import running_server, stop

MAIN = "from keepstate.cli import main; main(prog_name='keepstate')"


def test_first_start_prints_an_admin_key_once_and_sigterm_stops_cleanly(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'boot.db'}"
    with running_server(store, extra_env={"KEEPSTATE_ADMIN_KEY": ""}) as first:
        printed = re.findall(r"\bks_[A-Za-z0-9_-]{32}\b", first.log())
        assert len(printed) == 1
        assert "lost it? `keepstate keys create --role admin --store URL` makes another" in first.log()
        answer = httpx.get(f"{first.url}/v0/keys", headers={"Authorization": f"Bearer {printed[0]}"})
        assert answer.status_code == 200 and answer.json()["keys"][0]["role"] == "admin"
        assert stop(first.process) in (0, -15)  # uvicorn re-raises SIGTERM after its graceful shutdown
        assert "store closed" in first.log()
    with running_server(store, extra_env={"KEEPSTATE_ADMIN_KEY": ""}) as second:
        assert re.findall(r"\bks_[A-Za-z0-9_-]{32}\b", second.log()) == []


def test_keys_create_makes_a_working_key_of_a_new_environment(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'keys.db'}"
    out = subprocess.run(
        [sys.executable, "-c", MAIN, "keys", "create", "--env", "team-b", "--role", "member", "--store", store],
        check=True,
        capture_output=True,
        text=True,
    )
    key = out.stdout.strip()
    assert key.startswith("ks_")
    with running_server(store) as server:
        mine = httpx.post(f"{server.url}/v0/sessions", json={"id": "s1"}, headers={"Authorization": f"Bearer {key}"})
        assert mine.status_code == 201
        admin = {"Authorization": f"Bearer {server.admin_key}"}
        assert httpx.get(f"{server.url}/v0/sessions/s1", headers=admin).status_code == 404  # other environment
    bad = subprocess.run(
        [sys.executable, "-c", MAIN, "keys", "create", "--role", "king", "--store", store],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0


def test_serve_refuses_a_redis_store_with_a_clear_message() -> None:
    done = subprocess.run(
        [sys.executable, "-c", MAIN, "serve", "--store", "redis://127.0.0.1:6379/0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "need PostgreSQL or SQLite" in done.stderr and "Traceback" not in done.stderr


def test_serve_refuses_an_unknown_store_url() -> None:
    done = subprocess.run(
        [sys.executable, "-c", MAIN, "serve", "--store", "mysql://x/y", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "unknown store URL" in done.stderr


def test_serve_help_says_how_the_admin_key_is_set_and_replaced() -> None:
    done = subprocess.run([sys.executable, "-c", MAIN, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for said in ("KEEPSTATE_ADMIN_KEY=KEY", "keepstate keys create --role admin --store URL", "Lost it?"):
        assert said in done.stdout, said
