"""Fixtures for the SDK's end-to-end tests: one real ``keepstate serve`` per test module, keys per test."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sdk_helpers import Keys, make_key

from keepstate.client import Worker
from serverproc import ServerInfo, running_server


@pytest.fixture(scope="module")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """A server over a fresh SQLite store, with a short invocation lease so lease tests stay quick."""
    path: Path = tmp_path_factory.mktemp("sdk") / "server.db"
    with running_server(f"sqlite:///{path}", lease=3) as info:
        yield info


@pytest.fixture
def keys(sdk_server: ServerInfo) -> Keys:
    return Keys(member=make_key(sdk_server, "member"), worker=make_key(sdk_server, "worker"))


@pytest.fixture
def agent_name() -> str:
    """A fresh agent name, so tests sharing a server never claim each other's runs."""
    return f"agent-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def background() -> Iterator[Callable[[Worker], Any]]:
    """Runs workers in threads; stops and joins them when the test ends."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(worker: Worker) -> threading.Thread:
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))
        return thread

    yield start
    for worker, _ in started:
        worker.stop()
    for _, thread in started:
        thread.join(60)
        assert not thread.is_alive(), "a worker did not stop"
