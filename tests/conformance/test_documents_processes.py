"""Several real processes on one store's memory: compare-and-set holds and the index keeps up.

Run on every backend that several processes can share and that declares documents.
"""

from __future__ import annotations

from multiprocessing.synchronize import Event

import pytest

import keepstate
from backends import declaring
from store_workers import run_all

pytestmark = pytest.mark.parametrize("backend_url", declaring("shared", "documents"), indirect=True)


def _count(url: str, times: int, go: Event) -> None:
    """Add one line to a shared ledger ``times`` times, each with a read then a guarded write."""
    with keepstate.open(url) as store:
        memory = store.memory("ledger")
        go.wait(30)
        done = 0
        while done < times:
            found = memory.read("ledger")
            lines = [] if found is None else found.text.split("\n")
            try:
                memory.write("ledger", "\n".join([*lines, "tick"]), if_version=0 if found is None else found.version)
            except keepstate.VersionConflict:
                continue
            done += 1


def _write_users(url: str, writer: int, times: int, go: Event) -> None:
    """Each writer is one end user writing its own folder and searching it as it goes."""
    with keepstate.open(url) as store:
        memory = store.memory("kb", user=f"user{writer}")
        go.wait(30)
        for index in range(times):
            memory.write(f"users/{{user}}/note{index}", f"Note {index}\nwritten by writer{writer} zebra{index}")
            hits = memory.search(f"zebra{index}")
            assert [hit.path for hit in hits] == [f"users/user{writer}/note{index}"], hits


def test_guarded_writes_from_four_processes_lose_nothing(backend_url: str) -> None:
    run_all(_count, [(backend_url, 25)] * 4)
    with keepstate.open(backend_url) as store:
        found = store.memory("ledger").read("ledger")
    assert found is not None
    assert found.text.split("\n") == ["tick"] * 100
    assert found.version == 100


def test_writers_in_three_processes_each_find_only_their_own_folder(backend_url: str) -> None:
    run_all(_write_users, [(backend_url, writer, 30) for writer in range(3)])
    with keepstate.open(backend_url) as store:
        for writer in range(3):
            memory = store.memory("kb", user=f"user{writer}")
            assert len(list(memory.list())) == 30
            hits = memory.search("zebra7")
            assert [hit.path for hit in hits] == [f"users/user{writer}/note7"]
            assert {hit.path.split("/")[1] for hit in memory.search("note", limit=50)} == {f"user{writer}"}
