"""Heavy bodies against a real ``keepstate serve``: checking them must not hold up other requests.

Four concurrent PUTs of 690,000 empty objects (under 2 MiB, refused 413 once encoded) used to spend
~2.4 s each in a Python walk on the event loop while ``/healthz`` waited 4 s. That the loop stays free
is shown by construction, in process: a body's check is held at a known point until ``/healthz`` has
answered, which it can only do if the check runs off the event loop's thread. No test here times anything.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_helpers import Api, token

from keepstate import InvalidValue
from keepstate.server import http
from keepstate.server.app import create_app
from keepstate.values import MAX_BODY_BYTES, MAX_VALUE_BYTES

HANG_S = 60
"""Bounds a wait for the held check, so a blocked loop fails the test instead of hanging it."""
HEAVY = b'{"value":[' + b",".join([b"{}"] * 690_000) + b"]}"


@pytest.fixture
def live(api: Api) -> dict[str, str]:
    session_id = api.session(user=api.user)
    api.start("heavy", session_id=session_id)
    return token(api.claim("heavy")["token"])


def _poll_health(url: str, stop: threading.Event, statuses: list[int]) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.is_set():
            statuses.append(client.get("/healthz").status_code)


def _put(url: str, headers: dict[str, str], body: bytes) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=60) as client:
        return client.put("/v0/state/session/k", content=body, headers=headers)


def test_heavy_bodies_are_refused_while_the_server_goes_on_answering(api: Api, live: dict[str, str]) -> None:
    assert MAX_VALUE_BYTES < len(HEAVY) <= MAX_BODY_BYTES
    stop, statuses = threading.Event(), list[int]()
    poller = threading.Thread(target=_poll_health, args=(api.url, stop, statuses))
    poller.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: _put(api.url, live, HEAVY), range(4)))
    finally:
        stop.set()
        poller.join()
    assert [(answer.status_code, answer.json()["error"]) for answer in answers] == [(413, "too_large")] * 4
    assert statuses and set(statuses) == {200}


async def test_healthz_answers_while_a_heavy_body_is_being_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check of a heavy body is held (a thread event) until ``/healthz`` has answered: were the
    check on the event loop's thread, ``/healthz`` could only answer after it let go."""
    entered, release, checking = threading.Event(), threading.Event(), threading.Event()
    parse = http.parse_object

    def held(body: bytes, optional: bool = False) -> dict[str, object]:
        checking.set()
        entered.set()
        release.wait(HANG_S)
        checking.clear()
        return parse(body, optional)

    monkeypatch.setattr(http, "parse_object", held)
    app = create_app("memory://heavy-bodies", bootstrap_admin=True, admin_key="root")
    admin = {"Authorization": "Bearer root"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test", timeout=HANG_S) as client,
    ):
        put = asyncio.create_task(client.post("/v0/sessions", content=HEAVY, headers=admin))
        try:
            assert await asyncio.to_thread(entered.wait, HANG_S), "the heavy body was never checked"
            health = await client.get("/healthz")
            answered_while_checking = checking.is_set()
        finally:
            release.set()
        answered = await put
    assert health.status_code == 200 and answered_while_checking
    assert answered.status_code == 201, answered.text  # the request itself went on once its check let go


def test_a_valid_mib_of_empty_arrays_is_stored_and_read_back(api: Api, live: dict[str, str]) -> None:
    count = (MAX_VALUE_BYTES - 1) // 3  # "[" + "[]," * count, less the last comma, + "]"
    value_text = b"[" + b",".join([b"[]"] * count) + b"]"
    assert len(value_text) == MAX_VALUE_BYTES
    answer = api.http.put("/v0/state/session/arrays", content=b'{"value":' + value_text + b"}", headers=live)
    assert answer.status_code == 200, answer.text
    read = api.http.get("/v0/state/session/arrays", headers=live)
    assert read.status_code == 200
    assert read.content == b'{"value":' + value_text + b',"version":' + str(answer.json()["version"]).encode() + b"}"


async def test_big_bodies_are_parsed_off_the_event_loop_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A body from ``OFF_LOOP_BYTES`` is parsed on a worker thread, so the loop serves others meanwhile;
    a small one on the loop's own thread (a thread hop would cost more than its parse)."""
    threads: list[threading.Thread] = []
    parse = http.parse_object

    def recorded(body: bytes, optional: bool = False) -> dict[str, object]:
        threads.append(threading.current_thread())
        return parse(body, optional)

    monkeypatch.setattr(http, "parse_object", recorded)
    big = b'{"value":"' + b"x" * http.OFF_LOOP_BYTES + b'"}'
    assert await http.parse_body(b'{"value":1}') == {"value": 1}
    assert await http.parse_body(big) == {"value": "x" * http.OFF_LOOP_BYTES}
    with pytest.raises(InvalidValue) as refused:
        await http.parse_body(big[:-2] + b'\\u0000"}')
    assert refused.value.path == "$.value"
    loop_thread = threading.current_thread()
    assert threads[0] is loop_thread and threads[1] is not loop_thread and threads[2] is not loop_thread
