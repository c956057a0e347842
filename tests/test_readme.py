"""The README's examples run as written: the embedded one, and the server one against a real server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import keepstate
from serverproc import running_server

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_the_two_commands_first() -> None:
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, flags=re.S)
    assert first_block is not None
    assert [line.split()[:2] for line in first_block.group(1).splitlines()] == [["make", "run"], ["make", "test"]]


def test_embedded_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    names: dict[str, object] = {}
    exec(compile(_python_blocks()[0], "README-embedded", "exec"), names)
    store = names["store"]
    assert isinstance(store, keepstate.Store)
    store.close()
    assert capsys.readouterr().out.strip() == "[{'role': 'user', 'content': 'hi'}] 1"
    assert (tmp_path / "state.db").exists()


def test_server_example_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As written: its names are its own, the admin key comes from ``KEEPSTATE_ADMIN_KEY``."""
    with running_server(f"sqlite:///{tmp_path / 'k.db'}") as info:
        monkeypatch.setenv("KEEPSTATE_ADMIN_KEY", info.admin_key)
        code = _python_blocks()[1].replace("http://127.0.0.1:8420", info.url)
        names: dict[str, object] = {}
        exec(compile(code, "README-server", "exec"), names)
        for name in ("admin", "worker"):
            opened = names[name]
            assert isinstance(opened, keepstate.Client | keepstate.Worker)
            opened.close()
    assert capsys.readouterr().out.strip() == "{'reply': 'turn 1'}"
