"""``keepstate purge``, ``backup``, ``keys list``/``keys revoke`` and ``serve``'s lifecycle flags, as a
user drives them: what they print, and how they fail — one line on stderr, a non-zero exit, no
traceback, and nothing created (none of them makes a store that is not there)."""

from __future__ import annotations

import datetime
import json
import sqlite3
from pathlib import Path

import httpx
import pytest

from cliproc import assert_one_line_error, run_cli
from keepstate.stores.sql.platform import SQLITE_SCHEMA
from serverproc import running_server

NEVER_CREATE = {
    "purge": ["purge", "--older-than", "1"],
    "purge-dry": ["purge", "--older-than", "1", "--dry-run"],
    "backup": ["backup", "out.db"],
    "keys-list": ["keys", "list"],
    "keys-revoke": ["keys", "revoke", "key_x"],
}


@pytest.mark.parametrize("command", list(NEVER_CREATE))
def test_no_store_no_new_file(tmp_path: Path, command: str) -> None:
    done = run_cli(*NEVER_CREATE[command], "--store", f"sqlite:///{tmp_path / 'typo.db'}", cwd=tmp_path)
    assert_one_line_error(done, "typo.db", "does not exist")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["purge"], "--older-than"),
        (["purge", "--older-than", "-1"], "--older-than"),
        (["purge", "--older-than", "soon"], "--older-than"),
        (["purge", "--older-than", "1", "--store", "redis://127.0.0.1:6379"], "platform"),
        (["purge", "--older-than", "1", "--store", "memory://"], "memory://"),
        (["purge", "--older-than", "1", "--store", "mysql://x"], "unknown store URL"),
        (["backup"], "OUT.db"),
        (["backup", "out.db", "--store", "postgresql://postgres@127.0.0.1/test"], "pg_dump"),
        (["backup", "out.db", "--store", "redis://127.0.0.1:6379"], "RDB"),
        (["keys", "list", "--env", "bad env"], "--env"),
        (["keys", "revoke"], "ID"),
        (["keys", "create", "--role", "member", "--name", "n" * 201], "at most 200 characters"),
        (["serve", "--queue-timeout", "0"], "--queue-timeout"),
        (["serve", "--queue-timeout", "86401"], "--queue-timeout"),
        (["serve", "--retention-days", "0"], "--retention-days"),
        (["serve", "--retention-days", "many"], "--retention-days"),
    ],
)
def test_bad_input_is_one_line_and_touches_nothing(tmp_path: Path, args: list[str], needle: str) -> None:
    done = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(done, needle, status=2)
    assert list(tmp_path.iterdir()) == []


def _store(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path / 'ks.db'}"
    assert run_cli("keys", "create", "--role", "member", "--name", "m", "--store", store).returncode == 0
    return store


def test_backup_refuses_to_overwrite_unless_forced_and_to_copy_onto_itself(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = run_cli("backup", "--store", store, str(tmp_path / "copy.db"))
    platform_version = f"schema platform {len(SQLITE_SCHEMA)}"
    assert first.returncode == 0 and "integrity ok" in first.stdout and platform_version in first.stdout
    (tmp_path / "copy.db").write_bytes(b"keep me")
    assert_one_line_error(run_cli("backup", "--store", store, str(tmp_path / "copy.db")), "already exists", "--force")
    assert (tmp_path / "copy.db").read_bytes() == b"keep me"
    assert_one_line_error(run_cli("backup", "--store", store, str(tmp_path / "ks.db"), "--force"), "the store itself")
    assert_one_line_error(run_cli("backup", "--store", store, str(tmp_path / "no" / "copy.db")), "no directory")
    forced = run_cli("backup", "--store", store, str(tmp_path / "copy.db"), "--force")
    assert forced.returncode == 0, forced.stderr
    with sqlite3.connect(tmp_path / "copy.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT count(*) FROM ks_keys").fetchone() == (1,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()
    assert sorted(path.name for path in tmp_path.iterdir() if "partial" in path.name) == []


def test_keys_list_shows_no_secret_and_revoke_is_401_on_a_running_server(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'ks.db'}"
    created = run_cli("keys", "create", "--role", "member", "--name", "ops", "--store", store)
    secret = created.stdout.strip()  # the key alone on standard output, for scripts
    assert secret.startswith("ks_") and "\n" not in secret
    with running_server(store) as server:
        member = {"Authorization": f"Bearer {secret}"}
        assert httpx.get(f"{server.url}/v0/sessions", headers=member).status_code == 200
        listed = run_cli("keys", "list", "--json", "--store", store)
        assert listed.returncode == 0 and secret not in listed.stdout
        keys = json.loads(listed.stdout)["keys"]
        ops = [key for key in keys if key["name"] == "ops"]
        assert len(ops) == 1 and set(ops[0]) == {"id", "role", "name", "created_at"} and ops[0]["role"] == "member"
        assert (
            created.stderr
            == f"created member key {ops[0]['id']} 'ops' in default: the key above is shown only this once\n"
        )
        table = run_cli("keys", "list", "--store", store).stdout.splitlines()  # for people
        assert table[0].split() == ["ID", "ROLE", "NAME", "CREATED", "(UTC)"] and secret not in "".join(table)
        row = next(line.split() for line in table if ops[0]["id"] in line)
        when = datetime.datetime.fromtimestamp(ops[0]["created_at"] / 1000, tz=datetime.UTC)
        assert row == [ops[0]["id"], "member", "ops", *when.strftime("%Y-%m-%d %H:%M:%S").split()]
        revoked = run_cli("keys", "revoke", ops[0]["id"], "--store", store)
        assert revoked.returncode == 0 and ops[0]["id"] in revoked.stdout
        assert httpx.get(f"{server.url}/v0/sessions", headers=member).status_code == 401
        after = json.loads(run_cli("keys", "list", "--json", "--store", store).stdout)["keys"]
        assert all(key["id"] != ops[0]["id"] for key in after)
        again = run_cli("keys", "revoke", ops[0]["id"], "--store", store)
        assert_one_line_error(again, "no unrevoked key", status=1)
        other_env = run_cli("keys", "list", "--env", "elsewhere", "--json", "--store", store)
        assert json.loads(other_env.stdout) == {"env": "elsewhere", "keys": []}
        assert (
            run_cli("keys", "list", "--env", "elsewhere", "--store", store).stdout
            == "no keys in environment elsewhere\n"
        )
        made = json.loads(run_cli("keys", "create", "--role", "worker", "--json", "--store", store).stdout)
        assert set(made) == {"id", "role", "name", "created_at", "env", "key"} and made["key"].startswith("ks_")


def test_purge_on_postgres_counts_then_purges(pg_url: str) -> None:
    assert_one_line_error(run_cli("purge", "--store", pg_url, "--older-than", "0"), "no keepstate", "never creates")
    assert run_cli("keys", "create", "--role", "member", "--store", pg_url).returncode == 0
    dry = run_cli("purge", "--store", pg_url, "--older-than", "0", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith("would purge 0 finished run(s)"), dry.stderr
    assert run_cli("purge", "--store", pg_url, "--older-than", "0.5").stdout.startswith("purged 0 ")
