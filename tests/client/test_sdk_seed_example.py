"""The seed's chat agent, run as written by a Worker against a real server and driven by a Client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import sdk_seed_chat
from sdk_helpers import make_key

import keepstate
from serverproc import ServerInfo, running_server

HERE = Path(__file__).parent


def _turn(client: keepstate.Client, session_id: str, message: str) -> keepstate.Run:
    run = client.runs.start("chat", {"message": message}, session_id=session_id)
    return client.runs.wait(run.id, timeout=30)


def test_seed_chat_through_worker_and_client(tmp_path: Path) -> None:
    with running_server(f"sqlite:///{tmp_path / 'seed.db'}") as server:
        worker_key, member_key = make_key(server, "worker"), make_key(server, "member")
        worker = sdk_seed_chat.worker
        worker.configure(base_url=server.url, key=worker_key)
        worker.settings.claim_wait = 1
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            with keepstate.Client(server.url, key=member_key) as client:
                session = client.sessions.create(user="cust-123")
                first = _turn(client, session.id, "hi")
                assert first.status == "done", first
                assert first.output == {"reply": "turn 1: you said 'hi'", "visits": 1}
                second = _turn(client, session.id, "how are you")
                assert second.output == {"reply": "turn 2: you said 'how are you'", "visits": 2}
                other = client.sessions.create()
                third = _turn(client, other.id, "new")
                assert third.output == {"reply": "turn 1: you said 'new'", "visits": 3}
                assert first.user == "cust-123"
                assert first.session_id == session.id
        finally:
            worker.stop()
            thread.join(15)
        assert not thread.is_alive()


def test_worker_command_runs_the_module_and_stops_gracefully(sdk_server: ServerInfo) -> None:
    worker_key, member_key = make_key(sdk_server, "worker"), make_key(sdk_server, "member")
    env = {**os.environ, "KEEPSTATE_KEY": worker_key, "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-c",
        "from keepstate.cli import main; main(prog_name='keepstate')",
        "worker",
        "sdk_seed_chat:worker",
        "--url",
        sdk_server.url,
        "--concurrency",
        "2",
        "--poll",
        "1",
    ]
    process = subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        with keepstate.Client(sdk_server.url, key=member_key) as client:
            sessions = [client.sessions.create() for _ in range(3)]
            runs = [client.runs.start("chat", {"message": f"m{n}"}, session_id=s.id) for n, s in enumerate(sessions)]
            finished = [client.runs.wait(run.id, timeout=30) for run in runs]
        assert [run.status for run in finished] == ["done"] * 3
        assert [run.output["reply"] for run in finished] == [f"turn 1: you said 'm{n}'" for n in range(3)]
        assert sorted(run.output["visits"] for run in finished) == [1, 2, 3]
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)  # idle threads stop when their claim poll ends
    assert process.returncode == 0, output.decode()
    assert b"stopped after 3 invocation(s)" in output
