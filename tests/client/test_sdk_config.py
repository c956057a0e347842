"""What the SDK checks when it is built, and what it reads back: a malformed server URL is a
``ValueError`` at construction (not ``Unavailable`` at the first call), and ``Run`` carries the
server's ``cancel_requested``.
"""

from __future__ import annotations

from typing import Any

import pytest
from sdk_helpers import Keys

import keepstate
from keepstate.client import AsyncClient, AsyncWorker, Client, Worker
from keepstate.client.records import Run
from serverproc import ServerInfo

BAD = [
    "htp://127.0.0.1:8420",
    "127.0.0.1:8420",
    "localhost:8420",
    "http://",
    "http://h:99999",
    "http://h:port",
    "ftp://h",
    "http://h:8420/?x=1",
]
GOOD = ["http://127.0.0.1:8420", "https://keepstate.example", "http://[::1]:8420", "http://h:8420/behind/a/proxy"]
FACES: list[Any] = [Client, AsyncClient, Worker, AsyncWorker]


@pytest.mark.parametrize("face", FACES, ids=lambda face: face.__name__)
@pytest.mark.parametrize("url", BAD)
def test_a_malformed_url_is_refused_at_construction(face: Any, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KEEPSTATE_URL", raising=False)
    with pytest.raises(ValueError, match="expected http://host:port") as refused:
        face(url, key="ks_x")
    assert repr(url) in str(refused.value)
    monkeypatch.setenv("KEEPSTATE_URL", url)
    with pytest.raises(ValueError, match="KEEPSTATE_URL") as from_env:
        face(key="ks_x")
    assert repr(url) in str(from_env.value)


@pytest.mark.parametrize("face", FACES, ids=lambda face: face.__name__)
@pytest.mark.parametrize("url", GOOD)
def test_well_formed_urls_are_accepted(face: Any, url: str) -> None:
    built = face(url, key="ks_x")
    assert built is not None


def test_a_missing_scheme_gets_a_hint() -> None:
    with pytest.raises(ValueError, match=r"did you mean http://127\.0\.0\.1:8420\?"):
        Client("127.0.0.1:8420")


@pytest.mark.parametrize("face", [Worker, AsyncWorker], ids=lambda face: face.__name__)
def test_configure_refuses_a_malformed_url_and_keeps_the_good_one(face: Any) -> None:
    worker = face("http://127.0.0.1:8420", key="ks_x")
    with pytest.raises(ValueError, match="htp://x"):
        worker.configure(base_url="htp://x")
    assert worker.settings.config().base_url == "http://127.0.0.1:8420"


def test_run_parsing_is_tolerant_and_reads_cancel_requested() -> None:
    shape = {"id": "run_1", "agent": "a", "status": "running", "added_by_a_newer_server": 1}
    assert Run.from_dict(shape).cancel_requested is False
    assert Run.from_dict({**shape, "cancel_requested": None}).cancel_requested is False
    assert Run.from_dict({**shape, "cancel_requested": True}).cancel_requested is True
    assert Run.from_dict({"id": "run_2"}).status is None


def test_a_cancel_asked_while_running_shows_on_the_run(sdk_server: ServerInfo, keys: Keys, agent_name: str) -> None:
    seen: dict[str, bool] = {}
    with keepstate.Client(sdk_server.url, key=keys.member) as member:
        member.runs.start(agent_name, {"n": 1})
        worker = keepstate.Worker(sdk_server.url, key=keys.worker)

        @worker.agent(agent_name)
        def agent(inv: keepstate.Invocation) -> str:
            seen["before"] = member.runs.get(inv.run_id).cancel_requested
            member.runs.cancel(inv.run_id)
            seen["after"] = member.runs.get(inv.run_id).cancel_requested
            return "stopped"

        assert worker.poll_once(wait=10)
        worker.close()
    assert seen == {"before": False, "after": True}
