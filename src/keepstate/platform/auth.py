"""Secrets and their hashes: API keys and run tokens.

Both are random (192 and 256 bits) and shown once; the store keeps only their SHA-256. A slow
password hash buys nothing for random secrets of that size and would cost every request.
"""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "ks_"
TOKEN_PREFIX = "kst_"


def new_key_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(24)


def new_run_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def bearer(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer KEY`` header, or None."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and value else None
