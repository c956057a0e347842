"""Retained credentials, encrypted at rest and kept apart from session state.

``open_token_store(url, keys=[KEY, ...])`` shares tokens through the same backends as sessions but
in their own table / key space, so reading session state never touches a credential. Each token is
sealed with AES-256-GCM under the *first* key; any listed key opens it (rotation: put the new key
first, keep the old ones until every token was rewritten or expired). The blob is
``b"ks1" + key id (8 bytes of SHA-256 of the key) + nonce (12) + ciphertext``, with the session id
as associated data (a blob copied to another id does not open) and the expiry inside the sealed
plaintext (it cannot be extended by editing the database).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..clock import now_ms
from ..errors import KeepstateError
from ..stores.records import Blob
from ..values import check_key
from .base import Leases

ENV_KEYS = "KEEPSTATE_TOKEN_KEYS"
_MAGIC = b"ks1"
_KEY_ID_BYTES = 8
_NONCE_BYTES = 12


def parse_key(key: bytes | str) -> bytes:
    """A 32-byte key from raw bytes or urlsafe-base64 text (padding optional)."""
    if isinstance(key, str):
        text = key.strip()
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raise KeepstateError("a token key must be 32 bytes or urlsafe-base64 text of 32 bytes") from None
    else:
        raw = bytes(key)
    if len(raw) != 32:
        raise KeepstateError(f"a token key must be 32 bytes (AES-256), got {len(raw)}")
    return raw


def new_key() -> str:
    """A fresh random key as urlsafe-base64 text, ready for ``KEEPSTATE_TOKEN_KEYS``."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"keepstate-token-key:" + key).digest()[:_KEY_ID_BYTES]


def _aad(id: str) -> bytes:
    return b"keepstate-token:" + id.encode("utf-8")


class Sealer:
    """AES-GCM under the first key; opens under any listed key. Pure: no I/O."""

    def __init__(self, keys: Sequence[bytes | str]) -> None:
        parsed = [parse_key(key) for key in keys]
        if not parsed:
            raise KeepstateError(f"the token store needs at least one key (keys=[...] or {ENV_KEYS})")
        self._first = parsed[0]
        self._keys = {_key_id(key): AESGCM(key) for key in parsed}

    def seal(self, id: str, plaintext: bytes) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._keys[_key_id(self._first)].encrypt(nonce, plaintext, _aad(id))
        return _MAGIC + _key_id(self._first) + nonce + sealed

    def open(self, id: str, blob: bytes) -> bytes:
        """The plaintext; a clear KeepstateError when no listed key opens the blob."""
        if not blob.startswith(_MAGIC):
            raise KeepstateError(f"token {id!r}: not a keepstate token blob")
        key_id = blob[len(_MAGIC) : len(_MAGIC) + _KEY_ID_BYTES]
        aead = self._keys.get(key_id)
        if aead is None:
            raise KeepstateError(f"token {id!r} was sealed under a key that is not in this store's keys")
        start = len(_MAGIC) + _KEY_ID_BYTES
        try:
            return aead.decrypt(blob[start : start + _NONCE_BYTES], blob[start + _NONCE_BYTES :], _aad(id))
        except InvalidTag:
            raise KeepstateError(f"token {id!r} does not open under its key: tampered or wrong key") from None


class TokenStore:
    """``put``/``get``/``delete`` of retained tokens, sealed before they reach the backend."""

    def __init__(self, leases: Leases, sealer: Sealer) -> None:
        self.leases = leases
        self._sealer = sealer

    async def put(self, id: str, token: str, expires_at: int | None = None) -> None:
        """Store ``token`` for ``id`` (replacing any), readable until ``expires_at`` (ms) if given."""
        check_key(id, "token id")
        if not isinstance(token, str) or not token:
            raise KeepstateError("a token must be a non-empty string")
        plain = orjson.dumps({"token": token, "expires_at": expires_at})
        await (await self.leases.facet()).write(id, Blob(self._sealer.seal(id, plain), expires_at), None)

    async def get(self, id: str) -> str | None:
        """The token, or None when absent or expired; KeepstateError when no key opens it."""
        stored = await (await self.leases.facet()).read(check_key(id, "token id"))
        if stored is None or not stored.live(now_ms()):
            return None
        body = orjson.loads(self._sealer.open(id, stored.data))
        expires = body.get("expires_at")
        if expires is not None and expires <= now_ms():
            return None
        token: str = body["token"]
        return token

    async def delete(self, id: str) -> None:
        await (await self.leases.facet()).remove(check_key(id, "token id"), None)

    async def aclose(self) -> None:
        await self.leases.aclose()

    async def __aenter__(self) -> TokenStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def open_token_store(url: str, keys: Sequence[bytes | str] | None = None) -> TokenStore:
    """A token store at ``url``; ``keys`` defaults to ``KEEPSTATE_TOKEN_KEYS`` (comma-separated)."""
    if keys is None:
        keys = [k for k in os.environ.get(ENV_KEYS, "").split(",") if k.strip()]
    sealer = Sealer(keys)  # a missing or malformed key fails before anything connects
    from . import open_leases

    return TokenStore(open_leases(url, "tokens"), sealer)
