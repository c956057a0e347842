"""HTTP benchmark: keepstate's state GET/PUT against a bare app on the same server stack.

Three servers, each ``uvicorn`` with uvloop + httptools, one worker, no access log:
- ``bare``: a plain Starlette app serving a dict from memory (the floor of the stack);
- ``fastapi``: the same dict app in FastAPI (the framework comparison behind choosing Starlette);
- ``keepstate``: ``keepstate serve`` over SQLite (group-committed writes, ``synchronous=FULL``).

The load generator is a separate process: raw asyncio (uvloop) sockets, HTTP/1.1 keep-alive,
32 connections, one request in flight per connection, latency measured per request.
``run()`` returns a markdown ``## HTTP`` section.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from serverproc import free_port, running_server, stop  # noqa: E402

CONNECTIONS = 32
SECONDS = float(os.environ.get("KEEPSTATE_BENCH_SECONDS", "3"))
ROUNDS = 5
WARMUP = 1.0

BARE_APP = r"""
import sys, orjson, uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
store = {}
async def get(request):
    entry = store.get((request.path_params["scope"], request.path_params["key"]))
    if entry is None:
        return Response(b'{"error":"not_found"}', 404, media_type="application/json")
    return Response(orjson.dumps({"value": entry[0], "version": entry[1]}), media_type="application/json")
async def put(request):
    body = orjson.loads(await request.body())
    k = (request.path_params["scope"], request.path_params["key"])
    version = store.get(k, (None, 0))[1] + 1
    store[k] = (body["value"], version)
    return Response(orjson.dumps({"version": version}), media_type="application/json")
async def ready(request):
    return Response(b"{}", media_type="application/json")
app = Starlette(routes=[Route("/v0/state/{scope}/{key}", get, methods=["GET"]),
                        Route("/v0/state/{scope}/{key}", put, methods=["PUT"]),
                        Route("/readyz", ready)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http="httptools",
            access_log=False, log_level="warning")
"""

FASTAPI_APP = r"""
import sys, uvicorn
from typing import Any
from fastapi import FastAPI, Body
app = FastAPI()
store = {}
@app.get("/v0/state/{scope}/{key}")
async def get(scope: str, key: str):
    entry = store.get((scope, key))
    return {"value": entry[0], "version": entry[1]} if entry else {"error": "not_found"}
@app.put("/v0/state/{scope}/{key}")
async def put(scope: str, key: str, value: Any = Body(embed=True)):
    version = store.get((scope, key), (None, 0))[1] + 1
    store[(scope, key)] = (value, version)
    return {"version": version}
@app.get("/readyz")
async def ready():
    return {}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http="httptools",
            access_log=False, log_level="warning")
"""

LOADGEN = r"""
import asyncio, json, sys, time, uvloop
host, port = sys.argv[1], int(sys.argv[2])
seconds, warmup, conns = float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
request = sys.stdin.buffer.read()
async def one(lat, stop_at, measure_from):
    reader, writer = await asyncio.open_connection(host, port)
    while True:
        start = time.perf_counter()
        if start >= stop_at:
            break
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        if length:
            await reader.readexactly(length)
        if not head.startswith(b"HTTP/1.1 2"):
            raise SystemExit("bad answer: " + head[:80].decode())
        end = time.perf_counter()
        if start >= measure_from:
            lat.append(end - start)
    writer.close()
async def main():
    lat = []
    now = time.perf_counter()
    await asyncio.gather(*(one(lat, now + warmup + seconds, now + warmup) for _ in range(conns)))
    lat.sort()
    p50, p99 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
    print(json.dumps({"rps": len(lat) / seconds, "p50": p50, "p99": p99}))
uvloop.run(main())
"""


def load(url: str, request: bytes, generator: str = LOADGEN, connections: int = CONNECTIONS) -> dict[str, float]:
    """Run a load generator (``LOADGEN`` or a variant of it) in its own process against ``url`` with one
    raw request; its failure names what it printed."""
    host, port = url.removeprefix("http://").split(":")
    out = subprocess.run(
        [sys.executable, "-c", generator, host, port, str(SECONDS), str(WARMUP), str(connections)],
        input=request,
        capture_output=True,
        timeout=SECONDS + 60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"load generator failed: {out.stderr.decode()[-500:]}")
    result: dict[str, float] = json.loads(out.stdout)
    return result


def get_request(token: str = "") -> bytes:
    return (f"GET /v0/state/agent/k HTTP/1.1\r\nHost: bench\r\nx-agentos-run-token: {token}\r\n\r\n").encode()


def put_request(token: str = "") -> bytes:
    body = b'{"value":{"n":1,"text":"a small state value"}}'
    head = (
        f"PUT /v0/state/agent/k HTTP/1.1\r\nHost: bench\r\nx-agentos-run-token: {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def start_plain(code: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", code, str(port)])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.05)
    stop(process)
    raise RuntimeError("benchmark app did not start")


def keepstate_token(url: str, admin_key: str) -> str:
    with httpx.Client(base_url=url, timeout=10) as client:
        admin = {"Authorization": f"Bearer {admin_key}"}
        client.post("/v0/runs", json={"agent": "bench"}, headers=admin).raise_for_status()
        claimed = client.post("/v0/invocations/claim", json={"agents": ["bench"]}, headers=admin).json()
        token: str = claimed["token"]
        client.put("/v0/state/agent/k", json={"value": {"n": 1}}, headers={"x-agentos-run-token": token})
        return token


def _median(results: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(r[name] for r in results) for name in results[0]}


def measure(rounds: int = ROUNDS) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, float]]:
    """Bare, FastAPI and keepstate servers all up at once; the bare and keepstate loads alternate
    round by round, so drift on this shared machine hits both alike. Returns each server's median
    figures per call, and the median of the rounds' keepstate/bare ratios per call."""
    bare, bare_url = start_plain(BARE_APP)
    fast, fast_url = start_plain(FASTAPI_APP)
    try:
        with tempfile.TemporaryDirectory() as tmp, running_server(f"sqlite:///{tmp}/bench.db", lease=3600) as ks:
            token = keepstate_token(ks.url, ks.admin_key)
            requests = {"get": (get_request(), get_request(token)), "put": (put_request(), put_request(token))}
            for url in (bare_url, fast_url):
                load(url, put_request())  # warm up, and give GET a value to read
            runs: dict[str, dict[str, list[dict[str, float]]]] = {"bare": {}, "fastapi": {}, "keepstate": {}}
            for call, (plain, ours) in requests.items():
                runs["fastapi"][call] = [load(fast_url, plain)]
                for _ in range(rounds):
                    runs["bare"].setdefault(call, []).append(load(bare_url, plain))
                    runs["keepstate"].setdefault(call, []).append(load(ks.url, ours))
    finally:
        stop(bare)
        stop(fast)
    ratios = {
        call: statistics.median(
            o["rps"] / b["rps"] for b, o in zip(runs["bare"][call], runs["keepstate"][call], strict=True)
        )
        for call in ("get", "put")
    }
    medians = {server: {call: _median(found) for call, found in calls.items()} for server, calls in runs.items()}
    return medians, ratios


def run() -> str:
    medians, ratios = measure()
    lines = [
        "## HTTP",
        "",
        f"{CONNECTIONS} keep-alive connections, {SECONDS:.0f} s per load after {WARMUP:.0f} s warm-up; "
        "uvicorn + uvloop + httptools, 1 worker each; the load generator in its own process. "
        f"Bare Starlette and keepstate alternate in {ROUNDS} rounds per call: medians, and the median "
        "of the rounds' ratios (FastAPI: one round, for the framework choice).",
        "",
        "| server | call | req/s | p50 ms | p99 ms | vs bare |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    names = {"bare": "bare Starlette (dict)", "fastapi": "bare FastAPI (dict)", "keepstate": "keepstate (SQLite)"}
    for server, name in names.items():
        for call in ("get", "put"):
            r = medians[server][call]
            ratio = ratios[call] if server == "keepstate" else r["rps"] / medians["bare"][call]["rps"]
            cells = f"{r['rps']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {ratio:.2f}x"
            lines.append(f"| {name} | {call.upper()} | {cells} |")
    lines += [
        "",
        f"keepstate state GET is {ratios['get']:.2f}x the bare floor (target 0.6x); "
        "PUT is bound by the SQLite commit (group-committed, synchronous=FULL).",
    ]
    return "\n".join(lines) + "\n"
