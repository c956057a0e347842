"""Search by meaning over HTTP, against real ``keepstate serve --embedder`` processes.

The server embeds with ``meaning:flaky`` (tests/meaning.py, importable through PYTHONPATH), which
fails while a file exists: a write then keeps its document, and the server's background retry
(``KEEPSTATE_EMBED_RETRY``, shortened here) embeds it once the embedder is back.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import Api, token

from serverproc import ServerInfo, running_server

TESTS = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def down_flag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("embedder") / "down"


@pytest.fixture(scope="module")
def gate(down_flag: Path) -> Path:
    return down_flag.parent / "gate"


@pytest.fixture(scope="module")
def semantic_server(tmp_path_factory: pytest.TempPathFactory, down_flag: Path, gate: Path) -> Iterator[ServerInfo]:
    path = tmp_path_factory.mktemp("semantic")
    env = {
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "KEEPSTATE_TEST_EMBEDDER_DOWN": str(down_flag),
        "KEEPSTATE_TEST_EMBEDDER_GATE": str(gate),
        "KEEPSTATE_EMBED_RETRY": "0.2",
        "KEEPSTATE_EMBEDDER": "meaning:flaky",
    }
    with running_server(f"sqlite:///{path / 'server.db'}", extra_env=env) as info:
        yield info


@pytest.fixture
def sapi(semantic_server: ServerInfo) -> Iterator[Api]:
    client = Api(semantic_server)
    yield client
    client.close()


def run_of(api: Api, agent: str, user: str | None) -> dict[str, str]:
    session_id = api.session() if user is None else api.session(user=user)
    api.start(agent, session_id=session_id)
    return token(api.claim(agent)["token"])


def search(api: Api, headers: dict[str, str], prefix: str = "/v0/memory", **body: Any) -> httpx.Response:
    return api.http.post(f"{prefix}/search", json=body, headers=headers)


def hits(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [hit["path"] for hit in answer.json()["hits"]]


def test_every_mode_over_http_with_the_folder_rule(sapi: Api) -> None:
    agent = "travel-agent"
    alice, bob, nobody = run_of(sapi, agent, "alice"), run_of(sapi, agent, "bob"), run_of(sapi, agent, None)
    put = sapi.http.put
    assert put("/v0/memory/users/{user}/trip", json={"text": "alice's trip was called off"}, headers=alice).is_success
    assert put("/v0/memory/users/{user}/trip", json={"text": "bob's trip was called off"}, headers=bob).is_success
    storms = {"text": "Storms ground every flight.", "metadata": {"k": 1}}
    assert put("/v0/memory/kb/storms", json=storms, headers=nobody).is_success
    assert hits(search(sapi, alice, query="flight cancelled", mode="text")) == []
    for mode in ("semantic", "hybrid", None):
        body = {"query": "flight cancelled", **({} if mode is None else {"mode": mode})}
        assert hits(search(sapi, alice, **body))[0] == "users/alice/trip"
        assert set(hits(search(sapi, alice, **body))) == {"users/alice/trip", "kb/storms"}
        assert set(hits(search(sapi, bob, **body))) == {"users/bob/trip", "kb/storms"}
        assert hits(search(sapi, nobody, **body)) == ["kb/storms"]
        admin_user = f"/v0/users/bob/memory/{agent}"
        assert set(hits(search(sapi, sapi.admin, admin_user, **body))) == {"users/bob/trip", "kb/storms"}
        everyone = f"/v0/agents/{agent}/memory"
        assert len(hits(search(sapi, sapi.admin, everyone, **body))) == 3
        assert hits(search(sapi, alice, **body, filter={"k": 1})) == ["kb/storms"]
    [hit] = search(sapi, nobody, query="flight cancelled", mode="semantic").json()["hits"]
    assert set(hit) == {"path", "score", "snippet", "version"} and 0 < hit["score"] <= 1.0001
    assert hit["snippet"] == "Storms ground every flight." and hit["version"] == 1
    refused = search(sapi, alice, query="x", mode="semantic", prefix="users/bob/")
    assert refused.status_code == 404 and refused.json()["error"] == "not_found"


@pytest.mark.parametrize(
    "body",
    [
        {"query": "x", "mode": "fuzzy"},
        {"query": "x", "mode": 1},
        {"query": "x", "filter": []},
        {"query": "x", "filter": {"a": {"b": 1}}},
        {"query": "", "mode": "semantic"},
        {"query": '"open', "mode": "hybrid"},
    ],
)
def test_malformed_searches_are_400(sapi: Api, body: dict[str, Any]) -> None:
    answer = search(sapi, run_of(sapi, "bad-searches", None), **body)
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_request", answer.text


def test_without_an_embedder_meaning_is_409_no_embedder(api: Api) -> None:
    run = run_of(api, "plain-agent", None)
    assert api.http.put("/v0/memory/notes/x", json={"text": "the trip"}, headers=run).is_success
    assert hits(search(api, run, query="trip")) == ["notes/x"]
    for mode in ("semantic", "hybrid"):
        answer = search(api, run, query="trip", mode=mode)
        assert answer.status_code == 409 and answer.json()["error"] == "no_embedder", answer.text


def test_a_failing_embedder_loses_nothing_and_the_server_retries(sapi: Api, down_flag: Path) -> None:
    run = run_of(sapi, "flaky-agent", None)
    down_flag.touch()
    try:
        written = sapi.http.put("/v0/memory/notes/trip", json={"text": "The trip was called off."}, headers=run)
        assert written.status_code == 200 and written.json() == {"version": 1}
        assert sapi.http.get("/v0/memory/notes/trip", headers=run).json()["text"] == "The trip was called off."
        assert hits(search(sapi, run, query="trip", mode="text")) == ["notes/trip"]
        failed = search(sapi, run, query="flight cancelled", mode="semantic")
        assert failed.status_code == 503 and failed.json()["error"] == "unavailable"
    finally:
        down_flag.unlink()
    deadline = time.monotonic() + 60
    while not hits(search(sapi, run, query="flight cancelled", mode="semantic")):
        assert time.monotonic() < deadline, "the server never embedded the document it kept"
        time.sleep(0.1)
    assert hits(search(sapi, run, query="flight cancelled", mode="semantic")) == ["notes/trip"]


def test_embedding_never_holds_the_event_loop(sapi: Api, gate: Path) -> None:
    """A write whose embedder is stuck (at a gate the test holds) leaves the server answering others."""
    run = run_of(sapi, "slow-agent", None)
    entered = Path(str(gate) + ".entered")
    entered.unlink(missing_ok=True)
    gate.touch()
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            body = {"text": "The trip was called off."}
            writing = pool.submit(sapi.http.put, "/v0/memory/notes/slow", json=body, headers=run)
            deadline = time.monotonic() + 60
            while not entered.exists():
                assert time.monotonic() < deadline and not writing.done(), "the write never reached the embedder"
                time.sleep(0.01)
            assert sapi.http.get("/healthz").json() == {"ok": True}  # served while the embedder is busy
            assert sapi.http.get("/v0/memory/notes/slow", headers=run).status_code == 404  # not written yet
            assert not writing.done()
            gate.unlink()
            assert writing.result(timeout=60).json() == {"version": 1}
    finally:
        gate.unlink(missing_ok=True)
    assert hits(search(sapi, run, query="flight cancelled", mode="semantic")) == ["notes/slow"]


def test_serve_refuses_a_bad_embedder_in_one_line(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "keepstate", "serve", "--store", f"sqlite:///{tmp_path / 's.db'}", "--port", "0"]
    done = subprocess.run([*args, "--embedder", "no_such_module:embed"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--embedder" in done.stderr and "cannot import no_such_module" in done.stderr
    assert not (tmp_path / "s.db").exists()
