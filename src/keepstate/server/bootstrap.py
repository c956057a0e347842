"""The bootstrap admin key: ``KEEPSTATE_ADMIN_KEY`` made an admin of ``default``, or a first key printed once.

Keys are random, at least 128 bits (the HTTP API's rule), and a chosen admin key is no exception:
``check_admin_key`` refuses one that cannot hold that many, judged by its length and the
character classes it uses. It cannot see whether the characters were drawn at random (a long
sentence passes), only refuse what is too short or too plain to be a key.
"""

from __future__ import annotations

import math
import string
import sys

from ..platform import Platform

MIN_BITS = 128
MIN_LENGTH = 22
"""``secrets.token_urlsafe(16)``, the shortest text that carries 128 random bits in URL-safe characters."""
MIN_DISTINCT = 8
MAKE_ONE = "python -c \"import secrets; print('ks_' + secrets.token_urlsafe(32))\""
_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits)
_OTHER = len(string.punctuation) + 1  # punctuation and space: every other character counts as one of these


def key_bits(key: str) -> float:
    """At most how many random bits ``key`` can hold: its length × log2 of the character classes it uses."""
    pool = sum(len(chars) for chars in _CLASSES if any(c in chars for c in key))
    if any(not any(c in chars for chars in _CLASSES) for c in key):
        pool += _OTHER
    return len(key) * math.log2(pool) if pool else 0.0


def check_admin_key(key: str) -> None:
    """Raise ValueError, saying how to make a good one, unless ``key`` can hold 128 random bits."""
    bits = key_bits(key)
    if len(key) >= MIN_LENGTH and bits >= MIN_BITS and len(set(key)) >= MIN_DISTINCT:
        return
    raise ValueError(
        f"KEEPSTATE_ADMIN_KEY is too weak for an admin key ({len(key)} characters, {len(set(key))} different, "
        f"at most {bits:.0f} random bits; keys need {MIN_BITS}): make one with {MAKE_ONE}"
    )


async def bootstrap(platform: Platform, admin_key: str | None) -> str | None:
    """Ensure ``admin_key`` is an admin key of ``default``; with none and an empty store, create one.

    Returns the secret of a key created here (printed to stderr once), else None.
    """
    if admin_key:
        await platform.ensure_admin_key(admin_key)
        return None
    secret = await platform.create_first_admin_key()
    if secret is None:
        return None
    print(
        f"keepstate: created the first admin key of environment 'default' (shown once):\n  {secret}\n"
        "keepstate: lost it? `keepstate keys create --role admin --store URL` makes another, with no server",
        file=sys.stderr,
        flush=True,
    )
    return secret
