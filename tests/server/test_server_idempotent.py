"""``Idempotency-Key`` on every write route (``http-api.md``, "Idempotent writes"), on a real server over
every backend with a platform: a repeat answers the first answer again with ``Idempotent-Replayed: true``
and writes nothing; another request under the same key is 422 ``idempotency_mismatch``; keys are the
caller's own; a refused write is refused again alike; repeats racing the first write, on one server and
on two servers over one store, apply it once. What each test counts is the store's own state (the list,
the counter, the run's events), never how often a request was answered.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import Api, bearer, error_of, token

from backends import declaring, fresh_url
from cliproc import run_cli
from serverproc import ServerInfo, running_server

HEADER = "Idempotency-Key"
REPLAYED = "idempotent-replayed"


@pytest.fixture(scope="module", params=declaring("platform"))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    with fresh_url(request.param, tmp_path_factory.mktemp("idem")) as url, running_server(url) as info:
        yield info


@pytest.fixture
def api(served: ServerInfo) -> Iterator[Api]:
    client = Api(served)
    yield client
    client.close()


def fresh() -> str:
    return f"k-{secrets.token_hex(8)}"


def keyed(headers: dict[str, str], key: str) -> dict[str, str]:
    return {**headers, HEADER: key}


def twice(send: Callable[[], httpx.Response]) -> tuple[httpx.Response, httpx.Response]:
    """The first answer and its repeat's, the repeat checked to be the first one replayed."""
    first, again = send(), send()
    assert REPLAYED not in first.headers
    assert again.headers.get(REPLAYED) == "true", again.text
    assert (again.status_code, again.content) == (first.status_code, first.content)
    return first, again


def state(api: Api, session: str, agent: str = "chat") -> str:
    return f"/v0/sessions/{session}/state/{agent}"


def value(api: Api, session: str, key: str, agent: str = "chat") -> Any:
    answer = api.http.get(f"{state(api, session, agent)}/{key}", headers=api.member)
    return None if answer.status_code == 404 else answer.json()


# -- every state write, once ------------------------------------------------------------------


STATE_WRITES = {
    # name: (method, path tail, body), run after history = [1, 2, 3] and n = 5 exist
    "put": ("PUT", "doc", {"value": {"a": 1}}),
    "patch": ("PATCH", "doc", {"patch": {"b": 2}}),
    "append": ("POST", "history/append", {"items": [4]}),
    "trim": ("POST", "history/trim", {"keep_last": 2}),
    "pop": ("POST", "history/pop", None),
    "incr": ("POST", "n/incr", {"by": 2}),
    "delete": ("DELETE", "n", None),
}


@pytest.mark.parametrize("built", ["put", "append"])
@pytest.mark.parametrize("write", list(STATE_WRITES))
def test_each_state_write_repeated_with_its_key_is_applied_once(api: Api, write: str, built: str) -> None:
    """``built``: the list written whole (on PostgreSQL the first list write then takes the locked way, the
    repeat's one statement meets the kept answer and is undone) or appended (both go as one statement)."""
    session = api.session()
    base = state(api, session)
    api.http.put(f"{base}/doc", json={"value": {"a": 0}}, headers=api.member).raise_for_status()
    if built == "put":
        api.http.put(f"{base}/history", json={"value": [1, 2, 3]}, headers=api.member).raise_for_status()
    else:
        api.http.post(f"{base}/history/append", json={"items": [1, 2, 3]}, headers=api.member).raise_for_status()
    api.http.put(f"{base}/n", json={"value": 5}, headers=api.member).raise_for_status()
    method, tail, body = STATE_WRITES[write]
    headers = keyed(api.member, fresh())

    first, _ = twice(lambda: api.http.request(method, f"{base}/{tail}", json=body, headers=headers))
    assert first.status_code in (200, 204), first.text
    expected = {
        "put": ("doc", {"value": {"a": 1}, "version": 2}),
        "patch": ("doc", {"value": {"a": 0, "b": 2}, "version": 2}),
        "append": ("history", {"value": [1, 2, 3, 4], "version": 2}),
        "trim": ("history", {"value": [2, 3], "version": 2}),
        "pop": ("history", {"value": [1, 2], "version": 2}),
        "incr": ("n", {"value": 7, "version": 2}),
        "delete": ("n", None),
    }[write]
    assert value(api, session, expected[0]) == expected[1]
    if write == "pop":
        assert first.json()["item"] == 3


def test_a_batch_repeated_with_its_key_is_applied_once(api: Api) -> None:
    session = api.session()
    run = api.start("idem-batch", session_id=session)
    inv = api.claim("idem-batch")
    ops = [
        {"op": "append", "scope": "session", "key": "log", "items": ["a"]},
        {"op": "incr", "scope": "session", "key": "count"},
    ]
    headers = keyed(token(inv["token"]), fresh())
    first, _ = twice(lambda: api.http.post("/v0/state/batch", json={"ops": ops}, headers=headers))
    assert first.status_code == 200, first.text
    assert [item["value"] for item in first.json()["results"][1:]] == [1]
    assert value(api, session, "log", "idem-batch")["value"] == ["a"]
    assert value(api, session, "count", "idem-batch")["value"] == 1
    assert run["session_id"] == session


def test_a_key_used_again_for_another_request_is_refused_and_writes_nothing(api: Api) -> None:
    session = api.session()
    base = state(api, session)
    key = fresh()
    api.http.post(f"{base}/log/append", json={"items": [1]}, headers=keyed(api.member, key)).raise_for_status()

    other_body = api.http.post(f"{base}/log/append", json={"items": [2]}, headers=keyed(api.member, key))
    other_route = api.http.post(f"{base}/other/append", json={"items": [1]}, headers=keyed(api.member, key))
    other_method = api.http.put(f"{base}/log", json={"value": [9]}, headers=keyed(api.member, key))

    for answer in (other_body, other_route, other_method):
        error_of(answer, 422, "idempotency_mismatch")
    assert value(api, session, "log")["value"] == [1]
    assert value(api, session, "other") is None


def test_keys_belong_to_their_caller(api: Api) -> None:
    """The same key from another key is another write (two admins on one agent's state)."""
    other = bearer(api.new_key("admin"))
    counter = f"/v0/agents/idem-{secrets.token_hex(4)}/state/n"
    key = fresh()
    for headers in (api.admin, other):
        answer = api.http.post(f"{counter}/incr", headers=keyed(headers, key))
        assert answer.status_code == 200 and REPLAYED not in answer.headers, answer.text
    assert api.http.get(counter, headers=api.admin).json()["value"] == 2


def test_a_refused_write_is_refused_again_alike_and_never_applied_later(api: Api) -> None:
    """A pop of an empty list is 404; its repeat, after an item arrived, is that 404 again, not a pop."""
    session = api.session()
    base = state(api, session)
    headers = keyed(api.member, fresh())
    refused = api.http.post(f"{base}/queue/pop", headers=headers)
    error_of(refused, 404, "not_found")
    api.http.post(f"{base}/queue/append", json={"items": ["job"]}, headers=api.member).raise_for_status()

    again = api.http.post(f"{base}/queue/pop", headers=headers)
    assert again.headers.get(REPLAYED) == "true"
    assert (again.status_code, again.content) == (refused.status_code, refused.content)
    assert value(api, session, "queue")["value"] == ["job"]


def test_a_malformed_key_is_refused_before_anything_is_written(api: Api) -> None:
    session = api.session()
    for bad in ("", "has space", "x" * 201, "a/b"):
        headers = {**api.member, HEADER: bad}
        answer = api.http.post(f"{state(api, session)}/log/append", json={"items": [1]}, headers=headers)
        error_of(answer, 400, "invalid_request")
    assert value(api, session, "log") is None


# -- runs, invocations and events, once ---------------------------------------------------------


def test_starting_a_run_with_a_key_starts_one_run(api: Api) -> None:
    agent = f"idem-{secrets.token_hex(4)}"
    headers = keyed(api.member, fresh())
    first, _ = twice(lambda: api.http.post("/v0/runs", json={"agent": agent, "input": 1}, headers=headers))
    assert first.status_code == 202
    listed = api.http.get("/v0/runs", headers=api.member).json()["runs"]
    assert [run["id"] for run in listed if run["agent"] == agent] == [first.json()["id"]]


def test_emit_complete_decide_and_cancel_with_keys_land_once(api: Api) -> None:
    agent = f"idem-{secrets.token_hex(4)}"
    run = api.start(agent)
    inv = api.claim(agent)
    emit_headers = keyed(token(inv["token"]), fresh())
    body = {"events": [{"type": "token", "data": "a"}, {"type": "token", "data": "b"}]}
    twice(lambda: api.http.post(f"/v0/invocations/{inv['id']}/events", json=body, headers=emit_headers))
    hold_headers = keyed(token(inv["token"]), fresh())
    held, _ = twice(
        lambda: api.http.post(f"/v0/invocations/{inv['id']}/hold", json={"request": "ok?"}, headers=hold_headers)
    )
    assert held.json()["status"] == "held"

    decide_headers = keyed(api.member, fresh())
    decided, _ = twice(
        lambda: api.http.post(f"/v0/runs/{run['id']}/decision", json={"approved": True}, headers=decide_headers)
    )
    assert decided.json()["status"] == "queued"
    resumed = api.claim(agent)
    complete_headers = keyed(token(resumed["token"]), fresh())
    done, _ = twice(
        lambda: api.http.post(f"/v0/invocations/{resumed['id']}/complete", json={"output": 7}, headers=complete_headers)
    )
    assert done.json() == {"ok": True, "run_id": run["id"], "status": "done"}
    cancel_headers = keyed(api.member, fresh())
    twice(lambda: api.http.post(f"/v0/runs/{run['id']}/cancel", headers=cancel_headers))

    events = api.http.get(f"/v0/runs/{run['id']}/events", headers=api.member).json()["events"]
    assert [e["data"] for e in events if e["type"] == "token"] == ["a", "b"]
    statuses = [e["data"]["status"] for e in events if e["type"] == "run.status"]
    assert statuses == ["queued", "running", "held", "queued", "running", "done"]


def test_a_finished_invocations_repeat_is_answered_though_its_token_no_longer_writes(api: Api) -> None:
    agent = f"idem-{secrets.token_hex(4)}"
    api.start(agent)
    inv = api.claim(agent)
    headers = keyed(token(inv["token"]), fresh())
    path = f"/v0/invocations/{inv['id']}/fail"
    failure = {"error": {"type": "E", "message": "no"}}
    first = api.http.post(path, json=failure, headers=headers)
    assert first.status_code == 200, first.text
    unkeyed = api.http.post(path, json=failure, headers=token(inv["token"]))
    error_of(unkeyed, 401, "unauthorized")
    again = api.http.post(path, json=failure, headers=headers)
    assert again.headers.get(REPLAYED) == "true" and again.json() == first.json()
    other = api.http.post(path, json={"error": {"type": "E", "message": "other"}}, headers=headers)
    error_of(other, 422, "idempotency_mismatch")


# -- repeats racing the first write -------------------------------------------------------------


def race(send: Callable[[], httpx.Response], n: int) -> list[httpx.Response]:
    """``n`` sends released together by a barrier."""
    barrier = threading.Barrier(n)

    def one() -> httpx.Response:
        barrier.wait()
        return send()

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: one(), range(n)))


def test_repeats_racing_the_first_write_apply_it_once(api: Api) -> None:
    session = api.session()
    base = state(api, session)
    api.http.put(f"{base}/n", json={"value": 0}, headers=api.member).raise_for_status()
    for _ in range(5):
        headers = keyed(api.member, fresh())
        answers = race(lambda h=headers: api.http.post(f"{base}/n/incr", headers=h), 8)  # type: ignore[misc]
        assert {(a.status_code, a.content) for a in answers} == {(answers[0].status_code, answers[0].content)}
        assert sum(REPLAYED not in a.headers for a in answers) == 1
    assert value(api, session, "n")["value"] == 5


def test_an_emit_racing_its_repeats_lands_once(api: Api) -> None:
    """A worker's keyed emit sent 8 times at once, 5 times over: each emit's events once, in order, and
    every answer the first's (on PostgreSQL the emit and its answer are one statement; a repeat's is undone)."""
    agent = f"idem-{secrets.token_hex(4)}"
    run = api.start(agent)
    inv = api.claim(agent)
    path = f"/v0/invocations/{inv['id']}/events"
    for n in range(5):
        headers = keyed(token(inv["token"]), fresh())
        body = {"events": [{"type": "token", "data": n}]}
        answers = race(lambda h=headers, b=body: api.http.post(path, json=b, headers=h), 8)  # type: ignore[misc]
        assert {(a.status_code, a.content) for a in answers} == {(answers[0].status_code, answers[0].content)}
        assert answers[0].status_code == 200, answers[0].text
    events = api.http.get(f"/v0/runs/{run['id']}/events", headers=api.member).json()["events"]
    assert [e["data"] for e in events if e["type"] == "token"] == [0, 1, 2, 3, 4]


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    admin = f"ks_test_{secrets.token_urlsafe(24)}"
    with (
        fresh_url("postgres", tmp_path_factory.mktemp("two")) as url,
        running_server(url, admin) as a,
        running_server(url, admin) as b,
    ):
        yield [a.url, b.url, admin]


def test_a_repeat_sent_to_another_server_applies_the_write_once(two_servers: list[str]) -> None:
    """PostgreSQL, two servers: the original to one, its repeats to the other, all at once."""
    url_a, url_b, admin = two_servers
    with httpx.Client(base_url=url_a, timeout=60) as a, httpx.Client(base_url=url_b, timeout=60) as b:
        member = bearer(a.post("/v0/keys", json={"role": "member"}, headers=bearer(admin)).json()["key"])
        session = a.post("/v0/sessions", json={}, headers=member).json()["id"]
        path = f"/v0/sessions/{session}/state/chat/history/append"
        for n in range(5):
            headers = keyed(member, fresh())
            clients = [a, b, b, a, b, a]
            sends = [partial(c.post, path, json={"items": [n]}, headers=headers) for c in clients]
            answers = race_each(sends)
            assert len({(x.status_code, x.content) for x in answers}) == 1, [x.text for x in answers]
        history = a.get(f"/v0/sessions/{session}/state/chat/history", headers=member).json()["value"]
        assert history == [0, 1, 2, 3, 4]


def race_each(sends: Sequence[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    barrier = threading.Barrier(len(sends))

    def one(send: Callable[[], httpx.Response]) -> httpx.Response:
        barrier.wait()
        return send()

    with ThreadPoolExecutor(len(sends)) as pool:
        return list(pool.map(one, sends))


# -- the answer and the write are one step ------------------------------------------------------


def test_a_write_whose_answer_cannot_be_kept_is_not_applied(tmp_path: Path) -> None:
    """SQLite and PostgreSQL alike: a trigger refuses to keep the answers of one key; the write under that
    key fails whole (nothing appended), and the same write without a key still works."""
    for backend in ("sqlite", "postgres"):
        with fresh_url(backend, tmp_path) as url, running_server(url) as info:
            api = Api(info)
            refuse_answers_of(url, "k-doomed")
            session = api.session()
            base = state(api, session)
            failed = api.http.post(f"{base}/log/append", json={"items": [1]}, headers=keyed(api.member, "k-doomed"))
            assert failed.status_code == 500, failed.text
            assert value(api, session, "log") is None
            api.http.post(f"{base}/log/append", json={"items": [2]}, headers=api.member).raise_for_status()
            assert value(api, session, "log")["value"] == [2]
            api.close()


def refuse_answers_of(url: str, key: str) -> None:
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                f"CREATE TRIGGER refuse BEFORE INSERT ON ks_remembered WHEN NEW.key = '{key}' "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN IF NEW.key = '{key}' AND NEW.status IS NOT NULL THEN RAISE 'refused by the test'; END IF; "
            "RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON ks_remembered FOR EACH ROW EXECUTE FUNCTION refuse()"
        )


@pytest.mark.parametrize("write", ["append", "patch"])
def test_a_repeat_waits_for_the_first_write_then_gives_up_in_flight(tmp_path: Path, write: str) -> None:
    """PostgreSQL: while a transaction holds a key's claim, a write under that key is 409
    ``idempotency_in_flight`` (after its 10 s wait) and writes nothing; once the claim is gone it runs.
    An append is one statement keeping its answer (its insert of the key waits), a patch the claimed
    transaction (its claim waits)."""
    import psycopg

    with fresh_url("postgres", tmp_path) as url, running_server(url) as info:
        api = Api(info)
        made = api.http.post("/v0/keys", json={"role": "member"}, headers=api.admin).json()
        member = bearer(made["key"])
        session = api.http.post("/v0/sessions", json={}, headers=member).json()["id"]
        base = state(api, session)

        def send() -> httpx.Response:
            headers = keyed(member, "k-held")
            if write == "append":
                return api.http.post(f"{base}/log/append", json={"items": [1]}, headers=headers)
            return api.http.patch(f"{base}/log", json={"patch": {"a": 1}}, headers=headers)

        with psycopg.connect(url) as holder:
            holder.execute(
                "INSERT INTO ks_remembered (caller, key, fingerprint, created_at) VALUES (%s, 'k-held', '\\x00', 0)",
                (f"key:{made['id']}",),
            )
            error_of(send(), 409, "idempotency_in_flight")
            holder.rollback()
        assert api.http.get(f"{base}/log", headers=member).status_code == 404
        ran = send()
        assert ran.status_code == 200 and REPLAYED not in ran.headers, ran.text
        assert api.http.get(f"{base}/log", headers=member).json()["value"] == ([1] if write == "append" else {"a": 1})
        api.close()


# -- kept a day, then forgotten -----------------------------------------------------------------


@pytest.mark.parametrize("backend", declaring("platform", "shared"))
def test_answers_older_than_a_day_are_forgotten_and_their_keys_write_again(backend: str, tmp_path: Path) -> None:
    """``keepstate purge`` forgets one aged answer while no server runs; a server started next forgets
    another in its first sweep; both keys then write again, a key kept less than a day still replays."""
    admin = f"ks_test_{secrets.token_urlsafe(24)}"
    with fresh_url(backend, tmp_path) as url:
        with running_server(url, admin) as info:
            api = Api(info)
            session = api.session()
            path = f"{state(api, session)}/log/append"
            for key in ("k-cli", "k-sweep", "k-new"):
                api.http.post(path, json={"items": [key]}, headers=keyed(api.member, key)).raise_for_status()
            api.close()
        age_answer(url, "k-cli", 25 * 3600 * 1000)
        dry = run_cli("purge", "--store", url, "--older-than", "30", "--dry-run")
        assert "would purge 1 answer(s) of idempotent writes kept more than 24 hours" in dry.stdout, dry.stderr
        done = run_cli("purge", "--store", url, "--older-than", "30")
        assert "purged 1 answer(s) of idempotent writes kept more than 24 hours" in done.stdout, done.stderr
        age_answer(url, "k-sweep", 25 * 3600 * 1000)

        with running_server(url, admin) as info, httpx.Client(base_url=info.url, timeout=60) as http:
            wait_for_metric(http, "keepstate_sweep_answers_forgotten_total", 1.0)
            for key in ("k-cli", "k-sweep", "k-new"):
                http.post(path, json={"items": [key]}, headers=keyed(api.member, key)).raise_for_status()
            log = http.get(f"{state(api, session)}/log", headers=api.member).json()["value"]
    assert log == ["k-cli", "k-sweep", "k-new", "k-cli", "k-sweep"]


def wait_for_metric(http: httpx.Client, name: str, expected: float) -> None:
    """Until the server's ``/metrics`` show ``name`` at ``expected`` (a hang guard, not a timing)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in http.get("/metrics").text.splitlines():
            if line.startswith(name + " ") and float(line.split()[1]) == expected:
                return
        time.sleep(0.1)
    raise AssertionError(f"{name} never reached {expected}")


def age_answer(url: str, key: str, by_ms: int) -> None:
    """Move a kept answer ``by_ms`` into the past, as if it were kept then."""
    statement = "UPDATE ks_remembered SET created_at = created_at - {} WHERE key = {}"
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            assert conn.execute(statement.format("?", "?"), (by_ms, key)).rowcount == 1
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(statement.format("%s", "%s"), (by_ms, key)).rowcount == 1
