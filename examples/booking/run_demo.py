"""Start two booking workers on one store, select on one, confirm many times at once on both.

    python examples/booking/run_demo.py --store sqlite:///booking-demo.db

Prints each reply and, last, a JSON summary; exits 1 unless exactly one booking was made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_worker(store: str, ledger: Path, port: int) -> subprocess.Popen[bytes]:
    args = [sys.executable, str(HERE / "worker.py"), "--store", store, "--ledger", str(ledger), "--port", str(port)]
    return subprocess.Popen(args)


async def wait_healthy(client: httpx.AsyncClient, port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


async def demo(ports: list[int], ledger: Path, confirmations: int) -> dict[str, object]:
    context = {"tenant": {"id": "tenant_42"}, "locale": "ar-PS", "authorization": "Bearer never-stored"}
    async with httpx.AsyncClient(timeout=60) as client:
        for port in ports:
            await wait_healthy(client, port)

        async def say(port: int, text: str) -> str:
            url = f"http://127.0.0.1:{port}/sessions/demo-1/messages"
            response = await client.post(url, json={"text": text, "context": context})
            return str(response.json().get("reply", response.json()))

        print("user: book a table for two\nworker A:", await say(ports[0], "book a table for two"))
        replies = await asyncio.gather(*(say(ports[n % 2], "2") for n in range(confirmations)))
    for n, reply in enumerate(replies):
        print(f"user: 2 (to worker {'AB'[n % 2]})\nworker {'AB'[n % 2]}: {reply}")
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return {"bookings": len(lines), "booked_replies": sum(r.startswith("Booked") for r in replies)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", default="sqlite:///booking-demo.db")
    parser.add_argument("--confirmations", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Path(tmp) / "bookings.jsonl"
        ports = [free_port(), free_port()]
        workers = [start_worker(args.store, ledger, port) for port in ports]
        try:
            summary = asyncio.run(demo(ports, ledger, args.confirmations))
        finally:
            for worker in workers:
                worker.terminate()
                worker.wait(timeout=10)
    print(json.dumps(summary))
    return 0 if summary == {"bookings": 1, "booked_replies": 1} else 1


if __name__ == "__main__":
    sys.exit(main())
