"""Helpers for the session-store tests: backend lists, a free port, a cuttable TCP proxy, subprocess runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from backends import SERVED, declaring
from keepstate.sessions import SessionStore
from serverproc import free_port

__all__ = ["free_port"]  # re-exported for the session tests

STORES = declaring("leases")  # the stores themselves
ALL = STORES + SERVED  # and the session store a server serves over them
SHARED = declaring("leases", "shared") + SERVED  # what several processes can share


class Proxy:
    """A TCP forwarder to a real service; ``cut()`` drops every connection and stops listening."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers += [writer, up_writer]
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.transport.abort()


def with_port(url: str, port: int) -> str:
    """``url`` pointed at ``port`` on 127.0.0.1 (same user, database, query)."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


def target_of(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    default = 6379 if parts.scheme.startswith("redis") else 5432
    return parts.hostname or "127.0.0.1", parts.port or default


WORKER = Path(__file__).with_name("sessions_worker.py")


def spawn(*args: str) -> subprocess.Popen[str]:
    """Start the test worker in its own Python process."""
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> dict[str, Any]:
    """Wait for a worker; its last stdout line is a JSON report. A worker that outlives ``timeout`` is
    killed and fails the test (it would otherwise outlive the test, still holding what it holds)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"worker still running after {timeout} s (killed): {err[-3000:]}") from None
    assert proc.returncode == 0, f"worker failed ({proc.returncode}): {err[-3000:]}"
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


async def wait_for_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.02)


@dataclass
class DeafRenewals:
    """What ``deaf_renewals`` lets a test see and steer: a renewal began, it swallowed a cancellation,
    it may go on (set by the test), it ended."""

    began: asyncio.Event = field(default_factory=asyncio.Event)
    swallowed: asyncio.Event = field(default_factory=asyncio.Event)
    go_on: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)


async def deaf_renewals(store: SessionStore, go_on: bool = True) -> DeafRenewals:
    """Make ``store``'s renewals lose a cancellation, as a driver that swallows one does (psycopg_pool's
    wait on Python 3.11): each renewal waits until it is cancelled, swallows that, then (once ``go_on``
    is set: at once when ``go_on``) makes the real renewal. transact must not depend on the cancel."""
    facet = await store.leases.facet()
    renew = facet.renew
    steps = DeafRenewals()
    if go_on:
        steps.go_on.set()

    async def deaf(id: str, token: int, ttl_ms: int) -> bool:
        steps.began.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()  # only a cancellation ends this, and it is swallowed
        steps.swallowed.set()
        while not steps.go_on.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await steps.go_on.wait()
        try:
            return await renew(id, token, ttl_ms)
        finally:
            steps.ended.set()

    facet.renew = deaf  # type: ignore[method-assign]
    return steps
