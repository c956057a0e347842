"""``keepstate state get/put/delete/ls`` through click's CliRunner, on a SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import keepstate
from keepstate.cli import main


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state.db'}"


def state(store: str, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["state", *args, "--store", store], input=input)
    return result.exit_code, result.stdout, result.stderr


def test_put_get_ls_delete_round_trip(store: str) -> None:
    scope = ["--scope", "session", "--agent", "chat", "--id", "s-1"]
    code, out, _ = state(store, "put", *scope, "history", '[{"role": "user"}]')
    assert (code, json.loads(out)) == (0, {"key": "history", "version": 1})
    code, out, _ = state(store, "put", *scope, "notes", input='{"a": 1}')
    assert (code, json.loads(out)) == (0, {"key": "notes", "version": 1})
    code, out, _ = state(store, "get", *scope, "history")
    assert json.loads(out) == {"key": "history", "value": [{"role": "user"}], "version": 1}
    code, out, _ = state(store, "ls", *scope)
    assert json.loads(out) == {"keys": [{"key": "history", "version": 1}, {"key": "notes", "version": 1}]}
    code, out, _ = state(store, "ls", *scope, "--prefix", "no")
    assert json.loads(out) == {"keys": [{"key": "notes", "version": 1}]}
    code, out, _ = state(store, "delete", *scope, "notes")
    assert (code, json.loads(out)) == (0, {"key": "notes", "deleted": True})
    code, _, err = state(store, "get", *scope, "notes")
    assert code == 1
    assert json.loads(err)["error"] == "not_found"


def test_what_the_cli_writes_an_agent_reads(store: str) -> None:
    assert state(store, "put", "--scope", "agent", "--agent", "chat", "visits", "41")[0] == 0
    with keepstate.open(store) as opened:
        scope = opened.scope("agent", agent="chat")
        assert scope.get_versioned("visits") == (41, 1)
        scope.put("visits", 42)
    code, out, _ = state(store, "get", "--scope", "agent", "--agent", "chat", "visits")
    assert (code, json.loads(out)["value"]) == (0, 42)


def test_if_version_conflict_and_bad_input(store: str) -> None:
    scope = ["--scope", "user", "--agent", "chat", "--id", "cust-1", "--env", "staging"]
    assert state(store, "put", *scope, "k", '"a"', "--if-version", "0")[0] == 0
    code, _, err = state(store, "put", *scope, "k", '"b"', "--if-version", "0")
    assert code == 1
    assert json.loads(err) == {"error": "version_conflict", "message": json.loads(err)["message"], "current_version": 1}
    code, _, err = state(store, "put", *scope, "k", "NaN")
    assert (code, json.loads(err)["error"]) == (1, "invalid_value")
    code, _, err = state(store, "put", *scope, "bad key!", "1")
    assert (code, json.loads(err)["error"]) == (1, "invalid_key")
    with keepstate.open(store) as opened:
        assert opened.scope("user", agent="chat", id="cust-1", env="staging").get("k") == "a"
        assert opened.scope("user", agent="chat", id="cust-1").get("k") is None


def test_id_is_required_except_for_the_agent_scope(store: str) -> None:
    code, _, err = state(store, "get", "--scope", "session", "--agent", "chat", "k")
    assert code == 2
    assert "--id is required" in err


@pytest.mark.parametrize("command", [["state"], ["state", "get"], ["state", "put"], ["state", "ls"], ["worker"]])
def test_help(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.stdout


def test_worker_command_refuses_a_non_worker() -> None:
    result = CliRunner().invoke(main, ["worker", "json:dumps"])
    assert result.exit_code == 2
    assert "not a keepstate Worker" in result.stderr
