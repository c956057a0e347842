"""The contract of idempotent writes' answers (``PlatformFacet.recall/remember/keep/purge_remembered``), on
every store with a platform: ``work`` runs once per key and its write commits with its answer or not at
all; a key that holds an answer returns it and runs nothing; refusals are kept only where nothing is;
answers go after their time, the oldest first, and only those."""

from __future__ import annotations

import asyncio

import pytest

from backends import declaring
from keepstate.errors import VersionConflict
from keepstate.platform import Platform
from keepstate.stores.base import PlatformFacet
from keepstate.stores.remembered import Answer, Memo, Remembered

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)
NS = "agent/remembered/"


def memo(key: str, print_: bytes = b"p1") -> Memo:
    return Memo("key:test", key, print_, lambda result: Answer(200, b'{"length":%d}' % result[1]))


async def test_work_runs_once_per_key_and_its_answer_is_kept(platform: Platform, repo: PlatformFacet) -> None:
    state = platform.state
    runs = 0

    async def append() -> tuple[int, int]:
        nonlocal runs
        runs += 1
        return await state.append(NS, "log", [b'"a"'])

    first = await repo.remember(memo("k1"), append)
    again = await repo.remember(memo("k1"), append)

    assert not isinstance(first, Remembered) and tuple(first) == (1, 1) and runs == 1
    assert again == Remembered(b"p1", Answer(200, b'{"length":1}'))
    assert await repo.recall("key:test", "k1") == again
    assert await repo.recall("key:other", "k1") is None
    page = await state.tail(NS, "log", 10)
    assert page is not None and list(page.items) == [b'"a"']


async def test_work_that_fails_keeps_no_answer_and_writes_nothing(platform: Platform, repo: PlatformFacet) -> None:
    state = platform.state
    await state.put(NS, "n", b"1")

    async def conflicting() -> int:
        return await state.put(NS, "n", b"2", if_version=7)

    with pytest.raises(VersionConflict):
        await repo.remember(memo("k2"), conflicting)
    assert await repo.recall("key:test", "k2") is None
    entry = await state.get(NS, "n")
    assert entry is not None and (entry.data, entry.version) == (b"1", 1)


async def test_repeats_racing_run_the_work_once(platform: Platform, repo: PlatformFacet) -> None:
    state = platform.state

    async def append() -> tuple[int, int]:
        return await state.append(NS, "raced", [b"1"])

    results = await asyncio.gather(*(repo.remember(memo("k3"), append) for _ in range(6)))
    assert sum(not isinstance(result, Remembered) for result in results) == 1
    page = await state.tail(NS, "raced", 10)
    assert page is not None and page.length == 1


async def test_a_kept_refusal_never_replaces_an_answer(repo: PlatformFacet) -> None:
    await repo.keep(memo("k4"), Answer(404, b"{}"), 1)
    await repo.keep(memo("k4", b"p2"), Answer(409, b"{}"), 2)
    assert await repo.recall("key:test", "k4") == Remembered(b"p1", Answer(404, b"{}"))


async def test_answers_are_forgotten_after_their_time_oldest_first(repo: PlatformFacet) -> None:
    for n in range(5):
        await repo.keep(memo(f"old-{n}"), Answer(200, b"{}"), 1000 + n)
    await repo.keep(memo("new"), Answer(200, b"{}"), 10_000)

    assert await repo.count_remembered(5000) == 5
    assert await repo.purge_remembered(5000, 2) == 2
    assert [await repo.recall("key:test", f"old-{n}") is None for n in range(5)] == [True, True, False, False, False]
    assert await repo.purge_remembered(5000, 100) == 3
    assert await repo.count_remembered(5000) == 0
    assert await repo.recall("key:test", "new") is not None
