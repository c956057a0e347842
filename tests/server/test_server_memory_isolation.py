"""One end user's memory never reaches another's run: attacked over HTTP, on every shared store.

Two sessions of two end users (``alice``, the attacker, and ``bob``, the victim) each run the same
agent with a real run token. Bob's run files a secret in his folder; then Alice's run tries every
spelling of Bob's folder the issue names (encoded slashes, ``..``, case, double slashes, and more)
in every call: read, write, delete, list and search. Paths are sent byte for byte as written
(``http.client``: httpx would resolve ``..`` before sending). Whatever she tries, she gets an error
or only her own and shared documents, and Bob's secret is unchanged and alone in his folder.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import Api, token

from backends import declaring, fresh_url
from serverproc import ServerInfo, running_server

SECRET = "Bob's gate code is zebra-4711\nonly for bob"
SECRET_PATH = "users/bob/gate"
AGENT = "concierge"


@pytest.fixture(scope="module", params=declaring("platform", "documents", "shared"))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """This module's server, on every store a server can share with the CLI (it stands in for the
    suite's ``server``, so the suite's fixtures built on it, ``server_env_key``, serve each)."""
    with fresh_url(request.param, tmp_path_factory.mktemp("iso")) as url, running_server(url) as info:
        yield info


@dataclass
class Scene:
    api: Api
    alice: dict[str, str]
    bob: dict[str, str]
    anonymous: dict[str, str]


def run_token(api: Api, user: str | None) -> dict[str, str]:
    session = api.session(user=user) if user else api.session()
    api.start(AGENT, session_id=session)
    return token(api.claim(AGENT)["token"])


@pytest.fixture(scope="module")
def scene(server: ServerInfo) -> Iterator[Scene]:
    api = Api(server)
    found = Scene(api, run_token(api, "alice"), run_token(api, "bob"), run_token(api, None))
    assert api.http.put("/v0/memory/users/%7Buser%7D/gate", json={"text": SECRET}, headers=found.bob).status_code == 200
    assert (
        api.http.put(
            "/v0/memory/users/{user}/diary", json={"text": "alice's zebra diary"}, headers=found.alice
        ).status_code
        == 200
    )
    assert (
        api.http.put("/v0/memory/kb/zebra", json={"text": "Zebra facts for everyone"}, headers=found.alice).status_code
        == 200
    )
    yield found
    api.close()


def raw(info_url: str, method: str, path: str, headers: dict[str, str], body: Any = None) -> tuple[int, Any]:
    """Send ``path`` exactly as written; the status and the parsed answer."""
    parts = urlsplit(info_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        content = None if body is None else orjson.dumps(body)
        conn.request(method, path, body=content, headers={**headers, "content-type": "application/json"})
        answer = conn.getresponse()
        data = answer.read()
        return answer.status, orjson.loads(data) if data else None
    finally:
        conn.close()


def bob_is_intact(scene: Scene) -> None:
    """Bob's secret is as he wrote it (version 1), and nothing else is in his folder."""
    listed = scene.api.http.get(
        "/v0/agents/concierge/memory", params={"prefix": "users/bob/"}, headers=scene.api.admin
    ).json()
    assert [(d["path"], d["version"]) for d in listed["documents"]] == [(SECRET_PATH, 1)]
    found = scene.api.http.get(f"/v0/memory/{SECRET_PATH}", headers=scene.bob).json()
    assert found["text"] == SECRET


def leaks(answer: Any) -> bool:
    """Whether an answer holds anything of Bob's: his text anywhere, or one of his paths as data (an
    error message may echo the path that was asked for; that tells nothing)."""
    text = orjson.dumps(answer).decode()
    if "4711" in text or "gate code" in text:
        return True
    if not isinstance(answer, dict) or "error" in answer:
        return False
    found = [answer.get("path")] + [item.get("path") for item in answer.get("documents", []) + answer.get("hits", [])]
    return any(isinstance(path, str) and path.startswith("users/bob") for path in found)


SPELLINGS = [
    "users/bob/gate",
    "users%2Fbob%2Fgate",
    "users%2fbob%2fgate",
    "users/bob%2Fgate",
    "users%2F%7Buser%7D%2F..%2F..%2Fusers%2Fbob%2Fgate",
    "users/%62%6Fb/gate",
    "users/{user}/../bob/gate",
    "users/%7Buser%7D/../bob/gate",
    "users/alice/../bob/gate",
    "users/alice/../../users/bob/gate",
    "users/%7Buser%7D/%2E%2E/bob/gate",
    "users/alice/%2e%2e/bob/gate",
    "users/./bob/gate",
    "./users/bob/gate",
    "kb/../users/bob/gate",
    "users//bob/gate",
    "users/bob//gate",
    "/users/bob/gate",
    "//users/bob/gate",
    "users///bob/gate",
    "Users/bob/gate",
    "USERS/bob/gate",
    "users/Bob/gate",
    "users/BOB/gate",
    "users/bob/Gate",
    "users/bob%00/gate",
    "users/bob/gate%00",
    "users/bob%20/gate",
    "users\\bob\\gate",
    "users%5Cbob%5Cgate",
    "users/%EF%BD%82ob/gate",
    "users%252Fbob%252Fgate",
    "users/bob/gate/",
    "users/bob/gate/.",
    "users/bob/./gate",
    "users/bob:x/../gate",
    "users/{user}/../../users/bob/gate",
    "users/%7Bbob%7D/gate",
    "users/{bob}/gate",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_no_spelling_reads_writes_or_deletes_another_users_document(scene: Scene, spelling: str) -> None:
    url = scene.api.url
    for headers in (scene.alice, scene.anonymous):
        status, answer = raw(url, "GET", f"/v0/memory/{spelling}", headers)
        assert status in (400, 404, 409), (spelling, status, answer)
        assert not leaks(answer), (spelling, answer)
        status, answer = raw(url, "PUT", f"/v0/memory/{spelling}", headers, {"text": "pwned"})
        assert status in (400, 404, 409), (spelling, status, answer)
        status, answer = raw(url, "DELETE", f"/v0/memory/{spelling}", headers)
        assert status in (400, 404, 409), (spelling, status, answer)
        status, answer = raw(url, "DELETE", f"/v0/memory/{spelling}?if_version=1", headers)
        assert status in (400, 404, 409), (spelling, status, answer)
    bob_is_intact(scene)


PREFIXES = [
    "",
    "u",
    "users",
    "users/",
    "users/b",
    "users/bob",
    "users/bob/",
    "users/bob/g",
    "users/{user}/../bob/",
    "users//bob/",
    "users/Bob/",
    "Users/bob/",
    "users/%62ob/",
    "users/bob%2F",
    "/users/bob/",
    "users/./bob/",
    "users/{user}",
    "users/{user}/",
    "users/alice",
    "users/alice/",
    "users/al",
    "kb/../users/bob/",
    "users/bob\x00/",
    "users/*",
    "users/%",
    "users/_",
    "users/b%",
    "users/bob' OR '1'='1",
    "users/[b]ob/",
]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_no_prefix_lists_or_finds_another_users_documents(scene: Scene, prefix: str) -> None:
    http = scene.api.http
    for headers in (scene.alice, scene.anonymous):
        listed = http.get("/v0/memory", params={"prefix": prefix}, headers=headers)
        assert listed.status_code in (200, 400, 404, 409), (prefix, listed.text)
        assert not leaks(listed.json()), (prefix, listed.text)
        for query in ("zebra", "gate code", '"gate code"', "4711", "bob", "zebra-4711"):
            found = http.post("/v0/memory/search", json={"query": query, "prefix": prefix}, headers=headers)
            assert found.status_code in (200, 400, 404, 409), (prefix, query, found.text)
            assert not leaks(found.json()), (prefix, query, found.text)
    bob_is_intact(scene)


def test_alice_still_reaches_her_folder_and_the_shared_documents(scene: Scene) -> None:
    http = scene.api.http
    listed = http.get("/v0/memory", headers=scene.alice).json()
    assert [d["path"] for d in listed["documents"]] == ["kb/zebra", "users/alice/diary"]
    hits = http.post("/v0/memory/search", json={"query": "zebra"}, headers=scene.alice).json()["hits"]
    assert sorted(h["path"] for h in hits) == ["kb/zebra", "users/alice/diary"]
    assert http.get("/v0/memory/users/alice/diary", headers=scene.alice).status_code == 200
    anonymous = http.get("/v0/memory", headers=scene.anonymous).json()
    assert [d["path"] for d in anonymous["documents"]] == ["kb/zebra"]
    no_user = http.get("/v0/memory/users/%7Buser%7D/diary", headers=scene.anonymous)
    assert no_user.status_code == 409 and no_user.json()["error"] == "no_user"


def test_a_child_run_keeps_its_parents_folder(scene: Scene) -> None:
    http = scene.api.http
    child = http.post("/v0/runs", json={"agent": AGENT}, headers=scene.alice)
    assert child.status_code == 202 and child.json()["user"] == "alice"
    child_token = token(scene.api.claim(AGENT)["token"])
    assert http.get("/v0/memory/users/%7Buser%7D/diary", headers=child_token).json()["text"] == "alice's zebra diary"
    assert http.get(f"/v0/memory/{SECRET_PATH}", headers=child_token).status_code == 404


def test_run_tokens_never_open_the_callers_routes(scene: Scene) -> None:
    http = scene.api.http
    for path in (
        "/v0/agents/concierge/memory",
        f"/v0/agents/concierge/memory/{SECRET_PATH}",
        f"/v0/users/bob/memory/concierge/{SECRET_PATH}",
        "/v0/users/bob/memory/concierge",
    ):
        assert http.get(path, headers=scene.alice).status_code == 401, path
        assert http.put(path + "/x", json={"text": "x"}, headers=scene.alice).status_code == 401, path
    for root in ("/v0/agents/concierge/memory", "/v0/users/bob/memory/concierge"):
        answer = http.post(root + "/search", json={"query": "zebra"}, headers=scene.alice)
        assert answer.status_code == 401, root


def test_the_callers_routes_are_for_admins_and_their_environment(scene: Scene, server_env_key: str) -> None:
    http = scene.api.http
    for key in (scene.api.member, scene.api.worker):
        answer = http.get(f"/v0/users/bob/memory/concierge/{SECRET_PATH}", headers=key)
        assert answer.status_code == 403 and answer.json()["error"] == "forbidden"
        assert http.get("/v0/agents/concierge/memory", headers=key).status_code == 403
    other_env = {"Authorization": f"Bearer {server_env_key}"}
    assert http.get(f"/v0/users/bob/memory/concierge/{SECRET_PATH}", headers=other_env).status_code == 404
    assert http.get("/v0/agents/concierge/memory", headers=other_env).json()["documents"] == []
    alice_view = http.get(f"/v0/users/alice/memory/concierge/{SECRET_PATH}", headers=scene.api.admin)
    assert alice_view.status_code == 404
    bob_view = http.get("/v0/users/bob/memory/concierge/users/%7Buser%7D/gate", headers=scene.api.admin)
    assert bob_view.json()["text"] == SECRET


def test_credentials_are_checked_before_bodies(scene: Scene) -> None:
    http = scene.api.http
    dead = token("kst_not-a-token")
    for method, path in (("PUT", "/v0/memory/x"), ("POST", "/v0/memory/search")):
        assert http.request(method, path, content=b'{"text": NaN', headers=dead).status_code == 401
        huge = http.request(method, path, content=b"x" * (3 * 1024 * 1024), headers=dead)
        assert huge.status_code in (401, 413)
        assert http.request(method, path, content=b"{", headers={}).status_code == 401
    for path in ("/v0/agents/concierge/memory/x", "/v0/users/bob/memory/concierge/x"):
        assert http.put(path, content=b"{", headers=scene.api.member).status_code == 403
        assert http.put(path, content=b"{", headers={}).status_code == 401


PIECES = [
    "users",
    "bob",
    "Bob",
    "alice",
    "{user}",
    "%7Buser%7D",
    "..",
    ".",
    "%2E%2E",
    "%2F",
    "/",
    "//",
    "%00",
    "gate",
    "%62ob",
    "%252F",
    "\\",
    "kb",
    "zebra",
    "%2e",
    "?",
    "#",
    "%",
    ";",
    ":",
]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=8),
    method=st.sampled_from(["GET", "PUT", "DELETE"]),
    who=st.sampled_from(["alice", "anonymous"]),
)
def test_random_spellings_never_reach_bobs_folder(scene: Scene, pieces: list[str], method: str, who: str) -> None:
    spelling = "/".join(pieces).replace("#", "%23").replace("?", "%3F")
    headers = scene.alice if who == "alice" else scene.anonymous
    before = user_folders(scene)
    status, answer = raw(
        scene.api.url, method, f"/v0/memory/{spelling}", headers, {"text": "pwned"} if method == "PUT" else None
    )
    assert status < 500, (spelling, status, answer)
    assert not leaks(answer), (spelling, answer)
    after = user_folders(scene)
    assert [path for path in after if path.startswith("users/bob/")] == [SECRET_PATH]
    changed = set(before) ^ set(after)
    assert all(path.startswith("users/alice/") for path in changed) and (who == "alice" or not changed), changed


def user_folders(scene: Scene) -> list[str]:
    """Every document under ``users/``, as the agent's admin sees them."""
    listed = scene.api.http.get(
        "/v0/agents/concierge/memory", params={"prefix": "users/", "limit": 1000}, headers=scene.api.admin
    ).json()
    return [doc["path"] for doc in listed["documents"]]


def test_httpx_reads_the_same_as_raw(scene: Scene) -> None:
    """The SDK's HTTP library normalises ``..`` before sending: even then nothing of Bob's is reached."""
    with httpx.Client(base_url=scene.api.url, headers=scene.alice) as client:
        for spelling in ("users/{user}/../bob/gate", "users/alice/../bob/gate"):
            answer = client.get(f"/v0/memory/{spelling}")
            assert answer.status_code in (400, 404), answer.text
            assert not leaks(answer.json())
