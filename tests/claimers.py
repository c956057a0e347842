"""A live key to claim with, for tests that drive a store's platform facet directly.

A claim is made for a key, and claims nothing once that key is revoked (``PlatformFacet.claim``):
the facet-level tests claim with the worker key this adds once per store and environment.
"""

from __future__ import annotations

import contextlib

from keepstate.clock import now_ms
from keepstate.stores.base import PlatformFacet
from keepstate.stores.records import StoredKey


async def claimer(repo: PlatformFacet, env: str) -> str:
    """The id of a live worker key of ``env`` (added on first use)."""
    key_id, secret_hash = f"key_claimer_{env}", f"claimer-hash-{env}"
    if await repo.key_by_hash(secret_hash) is None:
        with contextlib.suppress(Exception):  # claims racing here: one adds it, the others find it added
            await repo.add_key(StoredKey(key_id, env, "worker", "claimer", now_ms()), secret_hash)
    assert await repo.key_by_hash(secret_hash) is not None
    return key_id
