"""Helpers of the server suite: an ``Api`` client of one server with fresh member and worker keys."""

from __future__ import annotations

import secrets
from typing import Any

import httpx

from serverproc import ServerInfo


def error_of(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The body of an error answer, checked to carry ``status`` and ``code`` with a message."""
    assert answer.status_code == status, answer.text
    body: dict[str, Any] = answer.json()
    assert body["error"] == code and isinstance(body["message"], str)
    return body


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def token(value: str) -> dict[str, str]:
    return {"x-agentos-run-token": value}


class Api:
    """A client of one server with a fresh member and worker key of environment ``default``."""

    def __init__(self, info: ServerInfo) -> None:
        self.url = info.url
        self.http = httpx.Client(base_url=info.url, timeout=60)
        self.admin = bearer(info.admin_key)
        self.member = bearer(self.new_key("member"))
        self.worker = bearer(self.new_key("worker"))
        self.user = f"u-{secrets.token_hex(6)}"
        """An end user of this client's member alone (an end user belongs to the member that names it first)."""

    def new_key(self, role: str) -> str:
        answer = self.http.post("/v0/keys", json={"role": role}, headers=self.admin)
        assert answer.status_code == 201, answer.text
        key: str = answer.json()["key"]
        return key

    def session(self, headers: dict[str, str] | None = None, **body: Any) -> str:
        answer = self.http.post("/v0/sessions", json=body, headers=headers or self.member)
        assert answer.status_code == 201, answer.text
        session_id: str = answer.json()["id"]
        return session_id

    def start(self, agent: str, headers: dict[str, str] | None = None, **body: Any) -> dict[str, Any]:
        answer = self.http.post("/v0/runs", json={"agent": agent, **body}, headers=headers or self.member)
        assert answer.status_code == 202, answer.text
        run: dict[str, Any] = answer.json()
        return run

    def claim(self, *agents: str, wait: float = 2) -> dict[str, Any]:
        answer = self.http.post(
            "/v0/invocations/claim", json={"agents": list(agents), "wait": wait}, headers=self.worker
        )
        assert answer.status_code == 200, answer.text
        claimed: dict[str, Any] = answer.json()
        return claimed

    def end(self, inv: dict[str, Any], kind: str = "complete", **body: Any) -> httpx.Response:
        return self.http.post(f"/v0/invocations/{inv['id']}/{kind}", json=body, headers=token(inv["token"]))

    def run(self, run_id: str, headers: dict[str, str] | None = None, wait: float = 0) -> dict[str, Any]:
        answer = self.http.get(f"/v0/runs/{run_id}", params={"wait": wait}, headers=headers or self.member)
        assert answer.status_code == 200, answer.text
        run: dict[str, Any] = answer.json()
        return run

    def close(self) -> None:
        self.http.close()
