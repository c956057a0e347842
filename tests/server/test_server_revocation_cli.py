"""``keepstate keys revoke``, run beside a serving ``keepstate serve`` on the same store, ends what the key holds.

The revocation is made by another process straight on the store: the server learns nothing of it but
what it reads from the store, and must refuse the key and the run tokens it claimed at once.
"""

from __future__ import annotations

import httpx
import pytest
from server_helpers import bearer, token

from backends import declaring
from cliproc import run_cli
from serverproc import running_server

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform", "shared"), indirect=True)

ROOT = "ks_root_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"


def test_revoking_from_the_command_line_ends_the_claims_the_server_handed_out(backend_url: str) -> None:
    with running_server(backend_url, admin_key=ROOT) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        made = http.post("/v0/keys", json={"role": "worker"}, headers=bearer(ROOT)).json()
        run = http.post("/v0/runs", json={"agent": "cli"}, headers=bearer(ROOT)).json()
        inv = http.post("/v0/invocations/claim", json={"agents": ["cli"]}, headers=bearer(made["key"])).json()
        assert http.put("/v0/state/run/k", json={"value": 1}, headers=token(inv["token"])).status_code == 200
        done = run_cli("keys", "revoke", made["id"], "--store", backend_url)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == (
            f"revoked key {made['id']}; 1 running invocation(s) it claimed ended, their runs interrupted"
        )
        assert http.get("/v0/state/run/k", headers=token(inv["token"])).status_code == 401
        assert http.post(f"/v0/invocations/{inv['id']}/heartbeat", headers=token(inv["token"])).status_code == 401
        assert http.get(f"/v0/runs/{run['id']}", headers=bearer(ROOT)).json()["status"] == "interrupted"
        assert (
            http.post("/v0/invocations/claim", json={"agents": ["cli"]}, headers=bearer(made["key"])).status_code == 401
        )
