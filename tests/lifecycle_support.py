"""What the lifecycle process tests share: the stores several servers share, a pair of real
``keepstate serve`` processes on one of them (one admin key, as behind a load balancer), new keys."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from backends import declaring
from serverproc import ServerInfo, running_server

Pair = tuple[ServerInfo, ServerInfo]
SHARED = pytest.mark.parametrize("backend_url", declaring("platform", "shared"), indirect=True)
"""The stores several server processes share: one SQLite file, one PostgreSQL schema."""


@contextmanager
def serve_pair(store: str, *extra: str, lease: float = 30) -> Iterator[Pair]:
    key = f"ks_pair_{secrets.token_urlsafe(24)}"
    with ExitStack() as stack:
        yield (
            stack.enter_context(running_server(store, admin_key=key, lease=lease, extra_args=extra)),
            stack.enter_context(running_server(store, admin_key=key, lease=lease, extra_args=extra)),
        )


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def new_key(server: ServerInfo, role: str) -> dict[str, str]:
    answer = httpx.post(f"{server.url}/v0/keys", json={"role": role}, headers=bearer(server.admin_key), timeout=60)
    assert answer.status_code == 201, answer.text
    return bearer(answer.json()["key"])
