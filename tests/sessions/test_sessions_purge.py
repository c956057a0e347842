"""Purging a store's session records, on every backend with leases: what expired a while ago goes,
nothing else does, and a purged lease never hands out an old fence again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sessions_support import STORES

from keepstate.clock import now_ms
from keepstate.sessions import open_leases
from keepstate.stores.base import LeaseFacet
from keepstate.stores.records import Blob

pytestmark = pytest.mark.parametrize("backend_url", STORES, indirect=True)
DAY_MS = 86_400_000


@pytest.fixture
async def facet(backend_url: str) -> AsyncIterator[LeaseFacet]:
    leases = open_leases(backend_url)
    yield await leases.facet()
    await leases.aclose()


async def test_only_what_expired_before_the_cutoff_goes(facet: LeaseFacet) -> None:
    now = now_ms()
    await facet.write("old", Blob(b'{"n": 1}', now - 2 * DAY_MS), None)
    await facet.write("recent", Blob(b'{"n": 2}', now - 3_600_000), None)
    await facet.write("forever", Blob(b'{"n": 3}', None), None)
    await facet.write("executing", Blob(b'{"n": 4}', now - 2 * DAY_MS, pinned=True), None)
    await facet.write("later", Blob(b'{"n": 5}', now + DAY_MS), None)
    cutoff = now - DAY_MS
    if facet.expires_itself:  # gone the moment they expired: nothing left to purge
        assert await facet.count_purgeable(cutoff) == 0 and await facet.purge(cutoff, 100) == 0
        assert await facet.read("recent") is None
    else:
        assert await facet.count_purgeable(cutoff) == 1
        assert await facet.purge(cutoff, 100) == 1
        assert await facet.count_purgeable(cutoff) == 0 and await facet.purge(cutoff, 100) == 0
        recent = await facet.read("recent")
        assert recent is not None and recent.data == b'{"n": 2}'  # expired, still readable until purged
    assert await facet.read("old") is None
    for id, n in (("forever", 3), ("executing", 4), ("later", 5)):
        kept = await facet.read(id)
        assert kept is not None and kept.data == f'{{"n": {n}}}'.encode()


async def test_purges_go_in_batches(facet: LeaseFacet) -> None:
    old = now_ms() - 2 * DAY_MS
    for n in range(7):
        await facet.write(f"b{n}", Blob(b"{}", old), None)
    if facet.expires_itself:
        return  # Redis deleted them when they expired
    gone = [await facet.purge(now_ms(), 3) for _ in range(4)]
    assert gone == [3, 3, 1, 0]


async def test_a_purged_lease_never_gives_an_old_fence_again(facet: LeaseFacet) -> None:
    tokens = []
    for _ in range(3):
        token = await facet.acquire("leased", 1000)
        assert token is not None
        tokens.append(token)
        await facet.release("leased", token)
    await asyncio.sleep(0.01)  # the clock moves on (a real purge takes leases free for a day)
    await facet.purge(now_ms() + 1000, 100)  # every lease free before then goes, where a store purges leases
    again = await facet.acquire("leased", 1000)
    assert again is not None and again > max(tokens)
    assert tokens == sorted(set(tokens))
