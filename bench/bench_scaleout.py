"""Scale-out benchmark: state GET and PUT over HTTP, one ``keepstate serve`` vs two on one PostgreSQL.

Both set-ups share one throwaway PostgreSQL schema and one run token (issued by one server, valid
on both). The load is the same in both: ``LOADGENS`` load-generator processes (``bench_http``'s,
imported, not copied) of ``CONNECTIONS / LOADGENS`` keep-alive connections each, every process on
its own state key; with one server all of them hit it, with two they are split evenly. ``run()``
returns a markdown ``## Scale-out on PostgreSQL`` section.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from urllib.parse import quote

from bench.bench_http import CONNECTIONS, LOADGEN, SECONDS, WARMUP, keepstate_token
from serverproc import running_server

PG_URL = os.environ.get(
    "KEEPSTATE_BENCH_POSTGRES", os.environ.get("KEEPSTATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
)
LOADGENS = 4
CALLS = ("get", "put")


@contextmanager
def throwaway_schema() -> Iterator[str]:
    import psycopg

    schema = f"ks_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{PG_URL}{'&' if '?' in PG_URL else '?'}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def request(call: str, key: str, token: str) -> bytes:
    head = f"/v0/state/agent/{key} HTTP/1.1\r\nHost: bench\r\nx-agentos-run-token: {token}\r\n"
    if call == "get":
        return f"GET {head}\r\n".encode()
    body = b'{"value":{"n":1,"text":"a small state value"}}'
    return f"PUT {head}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def load(urls: list[str], call: str, token: str) -> dict[str, float]:
    """``LOADGENS`` generators at once, spread over ``urls``; summed req/s, rps-weighted p50, worst p99."""
    procs = []
    for index in range(LOADGENS):
        host, port = urls[index % len(urls)].removeprefix("http://").split(":")
        args = [sys.executable, "-c", LOADGEN, host, port, str(SECONDS), str(WARMUP), str(CONNECTIONS // LOADGENS)]
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdin is not None
        proc.stdin.write(request(call, f"k{index}", token))
        proc.stdin.close()
        procs.append(proc)
    results = []
    for proc in procs:
        assert proc.stdout is not None
        out = proc.stdout.read()
        if proc.wait(timeout=SECONDS + 60) != 0:
            raise RuntimeError("a load generator failed")
        results.append(json.loads(out))
    rps = sum(r["rps"] for r in results)
    return {"rps": rps, "p50": sum(r["p50"] * r["rps"] for r in results) / rps, "p99": max(r["p99"] for r in results)}


def measure(store: str, servers: int) -> dict[str, dict[str, float]]:
    key = f"ks_bench_{secrets.token_urlsafe(16)}"
    with ExitStack() as stack:
        infos = [stack.enter_context(running_server(store, admin_key=key, lease=3600)) for _ in range(servers)]
        token = keepstate_token(infos[0].url, key)
        urls = [info.url for info in infos]
        for index in range(LOADGENS):  # every key exists before the GETs
            load_one_put(urls[0], f"k{index}", token)
        return {call: load(urls, call, token) for call in CALLS}


def load_one_put(url: str, key: str, token: str) -> None:
    import httpx

    answer = httpx.put(f"{url}/v0/state/agent/{key}", json={"value": {"n": 0}}, headers={"x-agentos-run-token": token})
    answer.raise_for_status()


def run() -> str:
    with throwaway_schema() as store:
        one = measure(store, 1)
        two = measure(store, 2)
    lines = [
        "## Scale-out on PostgreSQL",
        "",
        f"State GET and PUT over HTTP at {CONNECTIONS} keep-alive connections ({LOADGENS} load-generator processes, "
        f"each on its own key), {SECONDS:.0f} s per row after {WARMUP:.0f} s warm-up: one `keepstate serve` vs two "
        "sharing one PostgreSQL (`synchronous_commit=on`). Load generators, servers and PostgreSQL all share "
        f"this machine's {os.cpu_count()} cores. p50 is the req/s-weighted mean of the generators', p99 the worst.",
        "",
        "| servers | call | req/s | p50 ms | p99 ms | vs one server |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for count, results in ((1, one), (2, two)):
        for call in CALLS:
            r = results[call]
            cells = f"{r['rps']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['rps'] / one[call]['rps']:.2f}x"
            lines.append(f"| {count} | {call.upper()} | {cells} |")
    lines += ["", _reading(one, two)]
    return "\n".join(lines) + "\n"


def _reading(one: dict[str, dict[str, float]], two: dict[str, dict[str, float]]) -> str:
    get, put = (two[c]["rps"] / one[c]["rps"] for c in CALLS)
    return (
        f"Two servers gave {get:.2f}x the GET and {put:.2f}x the PUT throughput of one. This is not a scaling "
        f"curve: the load generators, the servers and PostgreSQL share this machine's {os.cpu_count()} cores. Where "
        "one server leaves CPU idle while its requests wait on PostgreSQL, a second one puts it to work (a ratio "
        "above 1); where the machine is already saturated, a second process adds only its overhead (a second "
        "event loop and pool, more context switches: a ratio below 1). A GET is one PostgreSQL round trip (the run "
        "token's check and the value in one statement), a PUT two (the token's check, then the write). Whether N "
        "servers on N machines give N times one needs those machines to measure; what holds on any number of them "
        "is correctness (tests/test_many_servers.py). A PUT also waits for the previous write of its key to commit "
        "(row lock + WAL flush), so each load generator writes its own key."
    )


if __name__ == "__main__":
    print(run())
