"""Export and import move every record losslessly: SQLite → PostgreSQL → SQLite, through the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import keepstate
from keepstate.stores import dump
from serverproc import running_server

CLI = [sys.executable, "-m", "keepstate"]


def _populate(url: str) -> dict[str, str]:
    """A server's worth of records: keys, a session, runs in several statuses, state of every scope."""
    with running_server(url) as info:
        admin = keepstate.Client(info.url, key=info.admin_key)
        member_key = str(admin.keys.create("member", name="caller").key)
        worker_key = str(admin.keys.create("worker").key)
        revoked = admin.keys.create("member")
        admin.keys.revoke(revoked.id)
        member = keepstate.Client(info.url, key=member_key)
        session = member.sessions.create(id="conv-1", user="cust-9", metadata={"topic": "é"})
        held = member.runs.start("chat", {"message": "first"}, session_id=session.id, idempotency_key="idem-1")
        worker = keepstate.Worker(info.url, key=worker_key)

        @worker.agent("chat")
        def chat(inv: keepstate.Invocation) -> object:
            inv.state.session.append("history", [{"role": "user", "content": inv.input["message"]}])
            inv.state.agent.update("visits", lambda n: n + 1, default=0)
            inv.state.user.put("profile", {"n": 2**62, "f": 0.1})
            inv.state.run.put("gone", 1)
            inv.state.run.delete("gone")
            if inv.kind == "start":
                inv.hold({"ask": "ok?"})
            return {"done": True}

        worker.run(stop_after=1)
        member.runs.decide(held.id, approved=True, data={"note": "yes"})
        worker.run(stop_after=1)
        assert member.runs.wait(held.id, timeout=10).status == "done"
        member.runs.start("chat", {"message": "second"}, session_id=session.id)  # stays queued
        for client in (admin, member):
            client.close()
        worker.close()
        return {"admin": info.admin_key, "member": member_key, "worker": worker_key, "run": held.id}


def _export(url: str, path: Path) -> list[bytes]:
    with path.open("wb") as out:
        subprocess.run([*CLI, "export", "--store", url], stdout=out, check=True, timeout=120)
    return path.read_bytes().splitlines()


def _import(url: str, path: Path) -> str:
    with path.open("rb") as dump:
        done = subprocess.run(
            [*CLI, "import", "--store", url], stdin=dump, capture_output=True, check=True, timeout=120
        )
    return done.stderr.decode()


def test_round_trip_sqlite_postgres_sqlite_is_lossless(tmp_path: Path, pg_url: str) -> None:
    first = f"sqlite:///{tmp_path / 'first.db'}"
    last = f"sqlite:///{tmp_path / 'last.db'}"
    keys = _populate(first)
    original = _export(first, tmp_path / "one.jsonl")
    assert "imported" in _import(pg_url, tmp_path / "one.jsonl")
    via_pg = _export(pg_url, tmp_path / "two.jsonl")
    _import(last, tmp_path / "two.jsonl")
    final = _export(last, tmp_path / "three.jsonl")

    kinds = {orjson.loads(line)["type"] for line in original}
    assert kinds == {"keepstate-export", "row", "state"}  # no memory written here: no document lines
    assert original == via_pg == final  # the same lines in the same order
    tables = {orjson.loads(line).get("table") for line in original} - {None}
    assert tables == set(dump.TABLES)
    assert not any(keys["member"].encode() in line for line in original), "a secret leaked into the dump"

    with running_server(last, admin_key=keys["admin"]) as info:  # the copy works as the original did
        member = keepstate.Client(info.url, key=keys["member"])
        assert member.sessions.get("conv-1").metadata == {"topic": "é"}
        assert member.runs.get(keys["run"]).status == "done"
        again = member.runs.start("chat", {"message": "first"}, session_id="conv-1", idempotency_key="idem-1")
        assert again.id == keys["run"]
        with pytest.raises(keepstate.SessionBusy):
            member.runs.start("chat", {"message": "third"}, session_id="conv-1")
        member.close()
    with keepstate.open(last) as store:
        history = store.scope("session", agent="chat", id="conv-1").get_versioned("history")
        assert [item["content"] for item in history.value] == ["first", "first"] and history.version == 2
        assert store.scope("agent", agent="chat").get_versioned("visits") == (2, 2)
        assert store.scope("user", agent="chat", id="cust-9").get("profile") == {"n": 2**62, "f": 0.1}
        run_scope = store.scope("run", agent="chat", id=keys["run"])
        assert run_scope.get_versioned("gone") == (None, 0)
        assert run_scope.put("gone", 3) == 3  # versions keep never repeating after the move


def test_a_state_dump_comes_back_in_the_same_order_from_redis_and_postgresql(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """Keys written out of order, in namespaces of every scope, with lists, expiries and tombstones: the
    dump of each store lists them in (namespace, key) order, byte for byte, so a copy's dump is the
    original's (Redis finds its keys by SCAN, in no order of its own)."""
    source = f"sqlite:///{tmp_path / 'state.db'}"
    with keepstate.open(source) as store:
        for n, key in enumerate(["zeta", "Alpha", "beta", "_under", "9lives", "a.b", "a:b", "a-b", "B"]):
            store.scope("agent", agent=f"agent-{n % 3}").put(key, {"n": n})
            store.scope("session", agent="chat", id=f"s-{9 - n}").append(key, [n, str(n)])
            store.scope("user", agent="chat", id="Zed" if n % 2 else "amy").put(key, n, ttl_seconds=3600)
        store.scope("agent", agent="agent-1").delete("beta")
    original = _export(source, tmp_path / "one.jsonl")
    states = [line for line in original if b'"type":"state"' in line]
    assert len(states) == 27 and states == sorted(states, key=lambda line: _ns_key(line))
    assert _import(redis_url, tmp_path / "one.jsonl") == "imported 27 state keys\n"
    assert [line for line in _export(redis_url, tmp_path / "redis.jsonl") if b'"type":"state"' in line] == states
    _import(pg_url, tmp_path / "one.jsonl")
    assert _export(pg_url, tmp_path / "pg.jsonl") == original


def _ns_key(line: bytes) -> tuple[bytes, bytes]:
    record = orjson.loads(line)
    return record["ns"].encode(), record["key"].encode()


def test_import_refuses_a_bad_dump_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"type": "keepstate-export", "version": 1}\n{"type": "row", "table": "users; DROP", "row": {}}\n')
    with bad.open("rb") as dump:
        done = subprocess.run(
            [*CLI, "import", "--store", f"sqlite:///{tmp_path / 'x.db'}"], stdin=dump, capture_output=True, timeout=60
        )
    assert done.returncode != 0
    assert b"unknown table" in done.stderr and b"Traceback" not in done.stderr


def test_memory_stores_cannot_be_exported(tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "export", "--store", "memory://"], capture_output=True, timeout=60)
    assert done.returncode != 0 and b"persistent store" in done.stderr


def test_migrate_prepares_every_part(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    done = subprocess.run(
        [*CLI, "migrate", "--store", url, "--harness-prefix", "h1_"], capture_output=True, timeout=60, check=True
    )
    assert b"state and platform" in done.stdout and b"session store" in done.stdout and b"'h1_'" in done.stdout
    import sqlite3

    with sqlite3.connect(tmp_path / "m.db") as conn:
        parts = {row[0] for row in conn.execute("SELECT component FROM keepstate_schema")}
    assert {"state", "platform"} <= parts and any("h1_" in part for part in parts) and len(parts) >= 4


def test_the_import_summary_counts_in_words() -> None:
    from keepstate.cli.transfer import imported

    assert imported({"document": 3, "ks_envs": 1, "state": 1}) == "1 environment, 1 state key, 3 documents"
    assert imported({"ks_keys": 2, "ks_session_agents": 1}) == "2 keys, 1 session agent"
    assert imported({}) == "no records"
