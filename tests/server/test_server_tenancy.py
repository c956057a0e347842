"""Who may act for an end user, and how long a key's name may be, on a real ``keepstate serve`` per backend.

An end user's state (the ``user`` scope) and memory folder are reached by the runs of sessions naming
that user. A member may name an end user only if it is the member key that named it first in the
environment: another member's session for that user is 403, so its runs never reach the user's data.
Admins act for every end user. A key's name is at most 200 characters on every way of making a key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_helpers import bearer, token

from backends import declaring
from keepstate.protocol import MAX_KEY_NAME
from serverproc import running_server

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform"), indirect=True)

ROOT = "ks_root_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
ADMIN = bearer(ROOT)


@pytest.fixture
def http(backend_url: str) -> Iterator[httpx.Client]:
    with running_server(backend_url, admin_key=ROOT) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def _key(http: httpx.Client, role: str) -> dict[str, str]:
    made = http.post("/v0/keys", json={"role": role}, headers=ADMIN)
    assert made.status_code == 201, made.text
    return bearer(made.json()["key"])


def _session(http: httpx.Client, headers: dict[str, str], user: str) -> httpx.Response:
    return http.post("/v0/sessions", json={"user": user}, headers=headers)


def _user_profile_via_a_run(http: httpx.Client, member: dict[str, str], session_id: str) -> Any:
    """What an agent run in the member's session reads of its end user's state (a worker's view)."""
    run = http.post("/v0/runs", json={"agent": "helper", "session_id": session_id}, headers=member).json()
    inv = http.post("/v0/invocations/claim", json={"agents": ["helper"]}, headers=_key(http, "worker")).json()
    assert inv["run_id"] == run["id"]
    got = http.get("/v0/state/user/profile", headers=token(inv["token"]))
    http.post(f"/v0/invocations/{inv['id']}/complete", json={}, headers=token(inv["token"]))
    return got.json() if got.status_code == 200 else got.status_code


def test_a_member_cannot_name_an_end_user_another_member_named_first(http: httpx.Client) -> None:
    first, second = _key(http, "member"), _key(http, "member")
    ada = _session(http, first, "ada")
    assert ada.status_code == 201, ada.text
    assert (
        http.put("/v0/users/ada/state/helper/profile", json={"value": {"plan": "gold"}}, headers=ADMIN).status_code
        == 200
    )
    assert _user_profile_via_a_run(http, first, ada.json()["id"]) == {"value": {"plan": "gold"}, "version": 1}
    refused = _session(http, second, "ada")
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden", refused.text
    assert "ada" in refused.json()["message"]
    listed = http.get("/v0/sessions", params={"user": "ada"}, headers=second).json()["sessions"]
    assert listed == []  # nothing was made for it
    assert _session(http, second, "bob").status_code == 201  # a user of its own
    assert _session(http, first, "ada").status_code == 201  # the first member, again
    by_admin = _session(http, bearer(ROOT), "ada")
    assert by_admin.status_code == 201  # admins act for every end user
    assert _user_profile_via_a_run(http, bearer(ROOT), by_admin.json()["id"])["value"] == {"plan": "gold"}


def test_a_key_name_is_at_most_200_characters_everywhere(http: httpx.Client) -> None:
    longest = http.post("/v0/keys", json={"role": "member", "name": "n" * MAX_KEY_NAME}, headers=ADMIN)
    assert longest.status_code == 201 and longest.json()["name"] == "n" * MAX_KEY_NAME
    for name in ("n" * (MAX_KEY_NAME + 1), "x" * 1_500_000, 7, ["a"]):
        refused = http.post("/v0/keys", json={"role": "member", "name": name}, headers=ADMIN)
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_request", refused.text
        assert "at most 200 characters" in refused.json()["message"]
    names = [key["name"] for key in http.get("/v0/keys", headers=ADMIN).json()["keys"]]
    assert max(len(name or "") for name in names) == MAX_KEY_NAME
