"""Helpers the SDK's end-to-end tests share (kept out of conftest so they import by a unique name)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from serverproc import ServerInfo


def make_key(server: ServerInfo, role: str) -> str:
    answer = httpx.post(
        f"{server.url}/v0/keys",
        json={"role": role},
        headers={"authorization": f"Bearer {server.admin_key}"},
        timeout=60,
    )
    assert answer.status_code == 201, answer.text
    secret: str = answer.json()["key"]
    return secret


@dataclass
class Keys:
    member: str
    worker: str
