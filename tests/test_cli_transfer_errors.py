"""``keepstate import`` refuses input that is not a whole dump, naming the line, and writes nothing;
``keepstate export`` cut short (Ctrl-C, a closed pipe) says so and leaves a dump that import refuses.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest

from backends import declaring
from cliproc import assert_one_line_error, finish, run_cli, start_cli
from serverproc import running_server

HEADER = {"type": "keepstate-export", "version": 2, "platform": False}
KEYS = 5000


def _state(key: str, version: int = 1, **extra: object) -> dict[str, object]:
    return {
        "type": "state",
        "ns": "default/agent/a/",
        "key": key,
        "version": version,
        "deleted": False,
        "value": {"n": key},
        **extra,
    }


def _end(records: int) -> dict[str, object]:
    return {"type": "keepstate-export", "end": True, "records": records}


def _text(*records: object) -> str:
    return "".join((record if isinstance(record, str) else orjson.dumps(record).decode()) + "\n" for record in records)


BAD_INPUTS = {
    "empty": ("", "the input is empty"),
    "blank lines": ("\n\n  \n", "the input is empty"),
    "no header": (_text(_state("k"), _end(1)), "line 1 is not the header"),
    "not json": (_text(HEADER, _state("k"), "{oops", _end(2)), "line 3 is not JSON"),
    "not an object": (_text(HEADER, "[1, 2]", _end(1)), "line 2 is not a JSON object"),
    "unknown type": (_text(HEADER, {"type": "user"}, _end(1)), "line 2: unknown record type 'user'"),
    "state without value": (
        _text(HEADER, {key: v for key, v in _state("k").items() if key != "value"}, _end(1)),
        "line 2: a bad state record (ns 'default/agent/a/', key 'k'): no 'value'",
    ),
    "state value not storable": (
        _text(
            HEADER,
            _state("k"),
            orjson.dumps(_state("big")).decode().replace('{"n":"big"}', "18446744073709551615"),
            _end(2),
        ),
        "line 3: a bad state record",
    ),
    "state version zero": (_text(HEADER, _state("k", 0), _end(1)), "line 2"),
    "state key missing": (
        _text(HEADER, {"type": "state", "ns": "n", "version": 1, "deleted": True}, _end(1)),
        "line 2: a bad state record (ns 'n'): no 'key'",
    ),
    "state key outside the charset": (
        _text(HEADER, _state("a b"), _end(1)),
        "line 2: a bad state record (ns 'default/agent/a/', key 'a b'): key must be 1-200 of",
    ),
    "state namespace of no scope": (
        _text(HEADER, _state("k", ns="default/robot/a/x"), _end(1)),
        "line 2: a bad state record",
        "namespace 'default/robot/a/x' is no scope's",
    ),
    "agent namespace with an id": (_text(HEADER, _state("k", ns="default/agent/a/x"), _end(1)), "is no scope's"),
    "session namespace without an id": (_text(HEADER, _state("k", ns="default/session/a/"), _end(1)), "no scope's"),
    "namespace with a bad part": (_text(HEADER, _state("k", ns="default/user/a b/u"), _end(1)), "no scope's"),
    "namespace not a string": (_text(HEADER, _state("k", ns=7), _end(1)), "namespace 7 is no scope's"),
    "state version past int64": (
        _text(HEADER, _state("k", 2**63 - 1), _end(1)),
        "key 'k'",
        "version must be an integer from 1 to 9007199254740991, got 9223372036854775807",
    ),
    "state version past the highest": (_text(HEADER, _state("k", 2**53), _end(1)), "version must be an integer"),
    "document version past the highest": (
        _text(
            {**HEADER, "version": 3},
            {
                "type": "document",
                "space": "default/a",
                "path": "notes",
                "version": 2**63 - 1,
                "deleted": False,
                "text": "t",
                "metadata": {},
                "updated_at": 1,
            },
            _end(1),
        ),
        "line 2: a bad document record (space 'default/a', path 'notes'): version must be an integer from 1 to",
    ),
    "unknown table": (
        _text(HEADER, {"type": "row", "table": "users; DROP", "row": {"a": 1}}, _end(1)),
        "line 2",
        "unknown table",
    ),
    "cut short": (_text(HEADER, _state("a"), _state("b")), "stops at line 3", "incomplete"),
    "lines after the end": (_text(HEADER, _state("a"), _end(1), _state("b")), "line 4 comes after"),
    "end count wrong": (_text(HEADER, _state("a"), _end(5)), "line 3", "damaged"),
    "future version": (_text({**HEADER, "version": 99}, _end(0)), "version 99"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_refused_by_line_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    text, *needles = BAD_INPUTS[case]
    store = tmp_path / "target.db"
    done = run_cli("import", "--store", f"sqlite:///{store}", input=text)
    assert_one_line_error(done, "nothing imported", *needles)
    assert not store.exists(), "the target store was created for a refused dump"


@pytest.mark.parametrize("bad", [_state("x", -1), _state("a b"), _state("k", 2**63 - 1), _state("k", ns="x/y")])
def test_bad_lines_after_good_ones_leave_an_existing_store_untouched(tmp_path: Path, bad: dict[str, object]) -> None:
    store = f"sqlite:///{tmp_path / 'target.db'}"
    assert run_cli("import", "--store", store, input=_text(HEADER, _state("kept"), _end(1))).returncode == 0
    done = run_cli("import", "--store", store, input=_text(HEADER, _state("new"), bad, _end(2)))
    assert_one_line_error(done, "nothing imported", "line 3")
    listed = run_cli("state", "ls", "--scope", "agent", "--agent", "a", "--store", store)
    assert orjson.loads(listed.stdout) == {"keys": [{"key": "kept", "version": 1}]}


def test_the_highest_version_and_the_consoles_sign_ins_still_import(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'target.db'}"
    sign_in = _state("s1", ns="keepstate/console/sessions/")
    done = run_cli("import", "--store", store, input=_text(HEADER, _state("top", 2**53 - 1), sign_in, _end(2)))
    assert done.returncode == 0, done.stderr
    got = run_cli("state", "get", "--scope", "agent", "--agent", "a", "top", "--store", store)
    assert orjson.loads(got.stdout)["version"] == 2**53 - 1


def test_a_dump_of_format_version_one_without_an_end_line_still_imports(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'target.db'}"
    done = run_cli("import", "--store", store, input=_text({"type": "keepstate-export", "version": 1}, _state("k")))
    assert done.returncode == 0 and done.stderr == "imported 1 state key\n"


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store whose dump is far larger than a pipe's buffer."""
    store = f"sqlite:///{tmp_path_factory.mktemp('big') / 'big.db'}"
    records = [_state(f"k{n:05d}", pad="x" * 50) for n in range(KEYS)]
    done = run_cli("import", "--store", store, input=_text(HEADER, *records, _end(KEYS)), timeout=120)
    assert done.returncode == 0, done.stderr
    return store


def test_an_export_interrupted_by_ctrl_c_says_so_and_its_dump_is_refused(tmp_path: Path, big_store: str) -> None:
    process = start_cli("export", "--store", big_store, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    try:
        first = process.stdout.readline()  # the export is running, blocked on the full pipe
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        finish(process)
    assert process.returncode == 130
    assert "Traceback" not in err and err.count("\n") == 1 and "interrupted" in err, err
    partial = first + out
    assert 0 < partial.count("\n") < KEYS + 2
    target = tmp_path / "copy.db"
    refused = run_cli("import", "--store", f"sqlite:///{target}", input=partial)
    assert_one_line_error(refused, "incomplete")
    assert not target.exists()


def test_an_export_whose_reader_goes_away_says_so(big_store: str) -> None:
    process = start_cli("export", "--store", big_store, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    try:
        process.stdout.readline()
        process.stdout.close()  # like `keepstate export | head -1`
        err = process.stderr.read()
    finally:
        status = finish(process, 60)
    assert status == 1
    assert err.count("\n") == 1 and "closed before the dump was complete" in err, err


def test_ctrl_c_while_import_waits_for_input_stops_it_and_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    process = start_cli("import", "--store", f"sqlite:///{target}", stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stderr is not None
    try:
        process.stdin.write(_text(HEADER, _state("a")))
        process.stdin.flush()
        _wait_until_reading(process)
        process.send_signal(signal.SIGINT)
        err = process.stderr.read()
    finally:
        status = finish(process, 60)
    assert status == 130
    assert err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err, err
    assert not target.exists()


def _wait_until_reading(process: subprocess.Popen[str]) -> None:
    """Until the process waits on its standard input (its Python has started and imported keepstate)."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            wchan = Path(f"/proc/{process.pid}/wchan").read_text()
        except OSError:
            wchan = ""
        if "pipe" in wchan or "wait_woken" in wchan:
            return
        time.sleep(0.05)
    raise AssertionError("the import never waited for input")


@pytest.mark.parametrize("backend_url", declaring("platform", "shared"), indirect=True)
def test_an_imported_key_at_the_highest_version_takes_writes_no_further_over_http(backend_url: str) -> None:
    top = 2**53 - 1
    dump = _text(
        HEADER, _state("top", top), _state("count", top - 1, value=41), _state("list", top, value=[1]), _end(3)
    )
    assert run_cli("import", "--store", backend_url, input=dump).returncode == 0
    root = "ks_root_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
    with running_server(backend_url, admin_key=root) as server, httpx.Client(base_url=server.url) as http:
        admin = {"Authorization": f"Bearer {root}"}
        done = http.post("/v0/agents/a/state/count/incr", json={}, headers=admin)
        assert done.status_code == 200 and done.json() == {"value": 42, "version": top}
        for refused in (
            http.put("/v0/agents/a/state/top", json={"value": 1}, headers=admin),
            http.post("/v0/agents/a/state/count/incr", json={}, headers=admin),
            http.post("/v0/agents/a/state/list/append", json={"items": [2]}, headers=admin),
        ):
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"] == "invalid_request" and "highest" in refused.json()["message"]
        assert http.get("/v0/agents/a/state/count", headers=admin).json() == {"value": 42, "version": top}
