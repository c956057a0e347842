"""The bootstrap admin key: ``KEEPSTATE_ADMIN_KEY`` made an admin of ``default``, or a first key printed once."""

from __future__ import annotations

import sys

from ..platform import Platform


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
    print(f"keepstate: created the first admin key of environment 'default' (shown once):\n  {secret}",
          file=sys.stderr, flush=True)
    return secret
