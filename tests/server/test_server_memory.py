"""Memory's HTTP API against a real server: answers, paging, limits, and every error with its code."""

from __future__ import annotations

from typing import Any

import pytest
from server_helpers import Api, error_of, token

MIB = 1024 * 1024


@pytest.fixture
def live(api: Api) -> dict[str, str]:
    """A run token of a running invocation of a fresh agent, with an end user."""
    agent = f"mem-{api.new_key('member')[-8:].replace('_', 'x').replace('-', 'x')}"
    session_id = api.session(user=api.user)
    api.start(agent, session_id=session_id)
    return token(api.claim(agent)["token"])


def test_a_document_answers_every_field(api: Api, live: dict[str, str]) -> None:
    put = api.http.put("/v0/memory/notes/a", json={"text": "Title\nbody", "metadata": {"k": [1]}}, headers=live)
    assert put.status_code == 200 and put.json() == {"version": 1}
    found = api.http.get("/v0/memory/notes/a", headers=live)
    assert found.status_code == 200 and found.headers["content-type"].startswith("application/json")
    body = found.json()
    assert set(body) == {"path", "text", "metadata", "version", "updated_at"}
    assert (body["path"], body["text"], body["metadata"], body["version"]) == ("notes/a", "Title\nbody", {"k": [1]}, 1)
    assert isinstance(body["updated_at"], int)
    assert api.http.head("/v0/memory/notes/a", headers=live).status_code == 200
    assert api.http.delete("/v0/memory/notes/a", headers=live).status_code == 204
    assert api.http.delete("/v0/memory/notes/a", headers=live).status_code == 204
    error_of(api.http.get("/v0/memory/notes/a", headers=live), 404, "not_found")


def test_listing_pages_with_next_and_after(api: Api, live: dict[str, str]) -> None:
    for n in range(5):
        api.http.put(f"/v0/memory/list/{n}", json={"text": str(n)}, headers=live)
    first = api.http.get("/v0/memory", params={"prefix": "list/", "limit": 2}, headers=live).json()
    assert [d["path"] for d in first["documents"]] == ["list/0", "list/1"] and first["next"] == "list/1"
    second = api.http.get(
        "/v0/memory/", params={"prefix": "list/", "limit": 2, "after": first["next"]}, headers=live
    ).json()
    assert [d["path"] for d in second["documents"]] == ["list/2", "list/3"]
    last = api.http.get("/v0/memory", params={"prefix": "list/", "after": "list/3"}, headers=live).json()
    assert [d["path"] for d in last["documents"]] == ["list/4"] and last["next"] is None
    assert set(last["documents"][0]) == {"path", "version", "updated_at"}
    error_of(api.http.get("/v0/memory", params={"limit": 0}, headers=live), 400, "invalid_request")
    error_of(api.http.get("/v0/memory", params={"after": "a b"}, headers=live), 400, "invalid_request")
    error_of(api.http.get("/v0/memory", params={"prefix": "a//"}, headers=live), 400, "invalid_request")


def test_search_answers_hits_best_first(api: Api, live: dict[str, str]) -> None:
    api.http.put("/v0/memory/kb/a", json={"text": "Refund policy\nrules"}, headers=live)
    api.http.put("/v0/memory/kb/b", json={"text": "Shipping\nlate parcels get a refund"}, headers=live)
    found = api.http.post("/v0/memory/search", json={"query": "refunds", "prefix": "kb/"}, headers=live).json()
    assert [h["path"] for h in found["hits"]] == ["kb/a", "kb/b"]
    assert set(found["hits"][0]) == {"path", "score", "snippet", "version"}
    assert found["hits"][0]["score"] > found["hits"][1]["score"]
    many = api.http.post("/v0/memory/search", json={"query": "refund", "limit": 1000}, headers=live)
    assert many.status_code == 200  # clamped to 50
    error_of(
        api.http.post("/v0/memory/search", json={"query": "refund", "limit": 0}, headers=live), 400, "invalid_request"
    )
    error_of(api.http.post("/v0/memory/search", json={"query": 'a "b'}, headers=live), 400, "invalid_request")
    error_of(api.http.post("/v0/memory/search", json={"query": 7}, headers=live), 400, "invalid_request")
    error_of(api.http.post("/v0/memory/search", json={}, headers=live), 400, "invalid_request")
    error_of(api.http.post("/v0/memory/search", json={"query": "x", "prefix": 3}, headers=live), 400, "invalid_request")
    error_of(
        api.http.post("/v0/memory/search", json={"query": "x", "limit": True}, headers=live), 400, "invalid_request"
    )


def test_search_is_a_post_and_search_is_also_a_document_name(api: Api, live: dict[str, str]) -> None:
    assert api.http.put("/v0/memory/search", json={"text": "a document called search"}, headers=live).json() == {
        "version": 1
    }
    assert api.http.get("/v0/memory/search", headers=live).json()["text"] == "a document called search"
    wrong = api.http.post("/v0/memory/notes/a", json={}, headers=live)
    error_of(wrong, 405, "invalid_request")
    assert set(wrong.headers["allow"].replace(" ", "").split(",")) >= {"GET", "PUT", "DELETE"}


@pytest.mark.parametrize(
    ("body", "status", "code", "path"),
    [
        ({}, 400, "invalid_request", None),
        ({"text": None}, 400, "invalid_request", None),
        ({"text": ["x"]}, 400, "invalid_request", None),
        ({"text": "x", "metadata": [1]}, 400, "invalid_request", None),
        ({"text": "x", "metadata": "m"}, 400, "invalid_request", None),
        ({"text": "x", "if_version": -1}, 400, "invalid_request", None),
        ({"text": "x", "if_version": "1"}, 400, "invalid_request", None),
        ({"text": "a\u0000b"}, 400, "invalid_value", "$.text"),
        ({"text": "x", "metadata": {"a": "b\u0000"}}, 400, "invalid_value", "$.metadata.a"),
        ({"text": "x" * (MIB + 1)}, 413, "too_large", None),
        ({"text": "x", "metadata": {"m": "x" * 16 * 1024}}, 413, "too_large", None),
    ],
)
def test_bad_writes_are_refused_with_their_code(
    api: Api, live: dict[str, str], body: dict[str, Any], status: int, code: str, path: str | None
) -> None:
    found = error_of(api.http.put("/v0/memory/bad", json=body, headers=live), status, code)
    if path is not None:
        assert found["path"] == path
    error_of(api.http.get("/v0/memory/bad", headers=live), 404, "not_found")


def test_bad_deletes_and_guards(api: Api, live: dict[str, str]) -> None:
    api.http.put("/v0/memory/guarded", json={"text": "x"}, headers=live)
    error_of(api.http.delete("/v0/memory/guarded", params={"if_version": "x"}, headers=live), 400, "invalid_request")
    error_of(api.http.delete("/v0/memory/guarded", params={"if_version": "-1"}, headers=live), 400, "invalid_request")
    conflict = error_of(
        api.http.delete("/v0/memory/guarded", params={"if_version": 9}, headers=live), 409, "version_conflict"
    )
    assert conflict["current_version"] == 1
    stale = error_of(
        api.http.put("/v0/memory/guarded", json={"text": "y", "if_version": 0}, headers=live), 409, "version_conflict"
    )
    assert stale["current_version"] == 1
    assert api.http.delete("/v0/memory/guarded", params={"if_version": 1}, headers=live).status_code == 204


def test_bodies_that_are_not_objects_or_json(api: Api, live: dict[str, str]) -> None:
    error_of(api.http.put("/v0/memory/x", content=b"[1]", headers=live), 400, "invalid_request")
    error_of(api.http.put("/v0/memory/x", content=b'{"text": NaN}', headers=live), 400, "invalid_value")
    error_of(api.http.put("/v0/memory/x", content=b"x" * (2 * MIB + 1), headers=live), 413, "too_large")
    error_of(api.http.post("/v0/memory/search", content=b"nope", headers=live), 400, "invalid_value")


def test_the_openapi_document_describes_memory(api: Api) -> None:
    paths = api.http.get("/openapi.json").json()["paths"]
    for prefix in ("/v0/memory", "/v0/agents/{agent}/memory", "/v0/users/{user}/memory/{agent}"):
        assert set(paths[f"{prefix}/{{path}}"]) == {"get", "put", "delete"}
        assert "post" in paths[f"{prefix}/search"] and "get" in paths[prefix]
