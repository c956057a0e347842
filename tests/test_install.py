"""Getting keepstate into a project the ways docs/install.md says, from an empty folder, as a user does:
pip into a fresh virtual environment from the clone (with an extra), npm install of the SDK's packed
tarball and of its folder; then the README's examples run there, against a real ``keepstate serve``.

The clone is a copy of the repository's files as they are now (tracked, and new ones not ignored):
what a user's clone holds, without this checkout's .venv, node_modules or build output. pip and npm
get what they need through their own settings and caches (a second run is quick). Without npm the
TypeScript half skips with one line, and fails under ``KEEPSTATE_REQUIRE_SERVICES=1``, as the SDK's
own tests do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from serverproc import running_server

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS_URL = "http://127.0.0.1:8420"
INSTALL_TIMEOUT_S = 900
LANGGRAPH_TURN = """
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from keepstate.integrations.langgraph import KeepstateSaver

builder = StateGraph(MessagesState)
builder.add_node("echo", lambda state: {"messages": [AIMessage(content="echo")]})
builder.add_edge(START, "echo")
builder.add_edge("echo", END)
with KeepstateSaver("sqlite:///./threads.db") as saver:
    graph = builder.compile(checkpointer=saver)
    done = graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t-1"}})
    print("langgraph", [message.content for message in done["messages"]])
"""


def user_env(**extra: str) -> dict[str, str]:
    """The environment a user's shell has: none of this test run's Python path or coverage hooks."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTHON", "COV_", "COVERAGE"))}
    return {**env, **extra}


def run(args: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=cwd, env=user_env(**extra), capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
    )
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def block(info: str, index: int = 0) -> str:
    """The ``index``-th fenced block of the README with this info string."""
    found: str = re.findall(rf"```{info}\n(.*?)```", README, flags=re.S)[index]
    return found


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files as a fresh clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    target = tmp_path_factory.mktemp("clone") / "keepstate"
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_pip_installs_the_clone_with_an_extra_into_a_fresh_environment(clone: Path, tmp_path: Path) -> None:
    """``pip install '/path/to/keepstate[langgraph]'`` in a new venv: its ``keepstate serve`` serves, the
    README's examples and a LangGraph thread through ``KeepstateSaver`` run in a new folder."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--quiet", f"{clone}[langgraph]"], tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    where = run([python, "-c", "import keepstate; print(keepstate.__file__)"], project).stdout
    assert where.startswith(str(venv)), where  # the installed package, not this checkout's
    with running_server(f"sqlite:///{tmp_path / 'served.db'}", python=python) as server:
        script = "\n".join([block("python", 0), block("python", 1).replace(DOCS_URL, server.url), LANGGRAPH_TURN])
        (project / "app.py").write_text(script)
        out = run([python, "app.py"], project, KEEPSTATE_ADMIN_KEY=server.admin_key).stdout.splitlines()
    assert out == [
        "[{'role': 'user', 'content': 'hi'}] 1",
        "{'reply': 'turn 1'}",
        "langgraph ['hi', 'echo']",
    ]
    help_text = run([str(venv / "bin" / "keepstate"), "serve", "--help"], project).stdout
    assert "KEEPSTATE_ADMIN_KEY" in help_text


@pytest.fixture(scope="module")
def npm() -> str:
    found = shutil.which("npm")
    if found is None:
        message = "npm is not installed: skipping the TypeScript install paths (Node.js 18+ and npm)"
        if os.environ.get("KEEPSTATE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{message}, and KEEPSTATE_REQUIRE_SERVICES=1")
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def tarball(clone: Path, npm: str) -> Path:
    """``npm ci && npm pack`` in the clone's SDK, as docs/install.md says: the tarball it wrote."""
    sdk = clone / "sdk" / "typescript"
    run([npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"], sdk)
    packed = run([npm, "pack"], sdk).stdout.strip().splitlines()[-1]
    return sdk / packed


@pytest.fixture
def project(tmp_path: Path, npm: str) -> Path:
    """A new npm project in an empty folder, holding the README's TypeScript example as ``chat.mjs``."""
    folder = tmp_path / "my-agent"
    folder.mkdir()
    run([npm, "init", "-y"], folder)
    (folder / "chat.mjs").write_text(block("ts"))
    return folder


def chat(project: Path) -> str:
    """``node chat.mjs`` against a fresh real server: what it printed."""
    node = shutil.which("node")
    assert node is not None
    with running_server("memory://") as server:
        script = project / "chat.mjs"
        script.write_text(script.read_text().replace(DOCS_URL, server.url))
        return run([node, "chat.mjs"], project, KEEPSTATE_ADMIN_KEY=server.admin_key).stdout.strip()


def test_the_readme_example_in_a_new_folder_says_what_is_missing(project: Path) -> None:
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run([node, "chat.mjs"], cwd=project, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "ERR_MODULE_NOT_FOUND" in done.stderr  # nothing installed yet
    assert "ERR_MODULE_NOT_FOUND" in (ROOT / "docs" / "install.md").read_text()  # the docs say what to do


def test_npm_installs_the_packed_tarball(project: Path, tarball: Path, npm: str) -> None:
    with tarfile.open(tarball) as packed:
        names = set(packed.getnames())
    assert {"package/dist/index.js", "package/dist/index.d.ts", "package/LICENSE", "package/README.md"} <= names
    assert not any(name.startswith(("package/src/", "package/test/", "package/build/")) for name in names)
    run([npm, "install", "--no-audit", "--no-fund", str(tarball)], project)
    installed = json.loads((project / "node_modules" / "keepstate" / "package.json").read_text())
    assert installed["license"] == "Apache-2.0"
    assert chat(project) == "{ reply: 'turn 1' }"


def test_npm_installs_the_sdk_folder(project: Path, tarball: Path, npm: str) -> None:
    """The folder, once built (``npm pack`` built it here), linked into the project."""
    run([npm, "install", "--no-audit", "--no-fund", str(tarball.parent)], project)
    assert (project / "node_modules" / "keepstate").resolve() == tarball.parent.resolve()
    assert chat(project) == "{ reply: 'turn 1' }"
