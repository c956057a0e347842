"""Heavy bodies against a real ``keepstate serve``: checking them must not hold up other requests.

Four concurrent PUTs of 690,000 empty objects (under 2 MiB, refused 413 once encoded) used to spend
~2.4 s each in a Python walk on the event loop while ``/healthz`` waited 4 s. Here a client polls
``/healthz`` throughout and every answer must come quickly (a generous bound for a shared machine).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_helpers import Api, token

from keepstate import InvalidValue
from keepstate.server import http
from keepstate.values import MAX_BODY_BYTES, MAX_VALUE_BYTES

HEALTH_BOUND_S = 1.0
"""Each ``/healthz`` answer during the heavy PUTs: measured up to 0.25 s on a shared 2-core machine
(the four bodies' checks, one after another), 2.5-4.8 s before bodies were checked at C speed."""


@pytest.fixture
def live(api: Api) -> dict[str, str]:
    session_id = api.session(user="u-1")
    api.start("heavy", session_id=session_id)
    return token(api.claim("heavy")["token"])


def _poll_health(url: str, stop: threading.Event, latencies: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            started = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(0.01)


def _put(url: str, headers: dict[str, str], body: bytes) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=60) as client:
        return client.put("/v0/state/session/k", content=body, headers=headers)


def test_heavy_bodies_do_not_hold_up_other_requests(api: Api, live: dict[str, str]) -> None:
    body = b'{"value":[' + b",".join([b"{}"] * 690_000) + b"]}"
    assert MAX_VALUE_BYTES < len(body) <= MAX_BODY_BYTES
    stop, latencies = threading.Event(), list[float]()
    poller = threading.Thread(target=_poll_health, args=(api.url, stop, latencies))
    poller.start()
    try:
        time.sleep(0.1)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: _put(api.url, live, body), range(4)))
        time.sleep(0.1)
    finally:
        stop.set()
        poller.join()
    assert [(answer.status_code, answer.json()["error"]) for answer in answers] == [(413, "too_large")] * 4
    assert len(latencies) >= 5
    assert max(latencies) < HEALTH_BOUND_S, sorted(latencies)[-5:]


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
