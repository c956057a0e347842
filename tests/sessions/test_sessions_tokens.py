"""The encrypted token store on every backend: sealed at rest, rotation, clear errors, kept apart."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Sequence

import pytest
from sessions_support import STORES

from keepstate import KeepstateError
from keepstate.clock import now_ms
from keepstate.sessions import open_leases, open_session_store, open_token_store
from keepstate.sessions.tokens import new_key

pytestmark = pytest.mark.parametrize("backend_url", STORES, indirect=True)
SECRET = "tok_live_9f8e7d6c5b4a"


async def put(url: str, keys: Sequence[bytes | str] | None, id: str, token: str) -> None:
    async with open_token_store(url, keys=keys) as tokens:
        await tokens.put(id, token)


async def get(url: str, keys: Sequence[bytes | str] | None, id: str) -> str | None:
    async with open_token_store(url, keys=keys) as tokens:
        return await tokens.get(id)


async def test_put_get_delete_and_sealed_at_rest(backend_url: str) -> None:
    async with open_token_store(backend_url, keys=[os.urandom(32)]) as tokens:
        await tokens.put("user-1", SECRET)
        assert await tokens.get("user-1") == SECRET
        raw_leases = open_leases(backend_url, "tokens")
        raw = await (await raw_leases.facet()).read("user-1")
        await raw_leases.aclose()
        assert raw is not None and SECRET.encode() not in raw.data and b"tok_live" not in raw.data
        async with open_session_store(backend_url) as sessions:
            assert await sessions.get("user-1") is None  # not in the session space
        await tokens.delete("user-1")
        assert await tokens.get("user-1") is None


async def test_rotation_reads_old_tokens_and_writes_under_the_first_key(backend_url: str) -> None:
    old, new = new_key(), base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    await put(backend_url, [old], "u", "old-token")
    assert await get(backend_url, [new, old], "u") == "old-token"
    await put(backend_url, [new, old], "u2", "new-token")
    assert await get(backend_url, [new], "u2") == "new-token"
    with pytest.raises(KeepstateError, match="not in this store's keys"):
        await get(backend_url, [old], "u2")


async def test_wrong_or_missing_key_is_a_clear_error(backend_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await put(backend_url, [os.urandom(32)], "u", SECRET)
    with pytest.raises(KeepstateError, match="not in this store's keys"):
        await get(backend_url, [os.urandom(32)], "u")
    monkeypatch.delenv("KEEPSTATE_TOKEN_KEYS", raising=False)
    with pytest.raises(KeepstateError, match="at least one key"):
        open_token_store(backend_url)
    with pytest.raises(KeepstateError, match="32 bytes"):
        open_token_store(backend_url, keys=[b"short"])
    key = new_key()
    monkeypatch.setenv("KEEPSTATE_TOKEN_KEYS", f"{key},{new_key()}")
    await put(backend_url, None, "env", SECRET)
    assert await get(backend_url, [key], "env") == SECRET


async def test_tokens_expire(backend_url: str) -> None:
    async with open_token_store(backend_url, keys=[new_key()]) as tokens:
        short_until = now_ms() + 50
        await tokens.put("short", SECRET, expires_at=short_until)
        await tokens.put("long", SECRET, expires_at=now_ms() + 3_600_000)
        while now_ms() <= short_until:  # the clock passes the short one's time (however slow this machine)
            await asyncio.sleep(0.01)
        assert await tokens.get("short") is None
        assert await tokens.get("long") == SECRET
