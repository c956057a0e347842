"""A TCP proxy in front of a real ``keepstate serve`` that loses answers on purpose.

``LosingProxy`` forwards each HTTP/1.1 request to the server and relays its answer, except for the
requests a test chose with ``lose(method, path_end)``: those are forwarded, the server's whole answer
is read (so the write was applied and its answer kept), and then the client's connection is dropped
(``drop``) without a byte of it, or held silent until the client gives up and closes it
(``withhold``: the client sees a read timeout). Which requests are lost is chosen by construction (the
first N whose method and path match), never by timing. Every request is recorded (method, path,
headers, whether it was lost), so a test can see the key a retry carried.

It runs its own event loop in a thread of its own, so the sync and the async SDK tests use it alike.
Bodies are read by ``Content-Length`` or chunked framing; an answer that is streamed until the
server closes (an event stream) is not for this proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

Mode = Literal["drop", "withhold"]
HEAD_LIMIT = 1 << 20


@dataclass(frozen=True)
class Seen:
    """One request that reached the proxy: its method, path (without the query), headers (names in
    lower case) and whether its answer was lost."""

    method: str
    path: str
    headers: dict[str, str]
    lost: bool

    @property
    def key(self) -> str | None:
        return self.headers.get("idempotency-key")


@dataclass
class _Rule:
    method: str
    path_end: str
    times: int
    mode: Mode


@dataclass
class _Message:
    head: bytes
    body: bytes
    first_line: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def raw(self) -> bytes:
        return self.head + self.body


class LosingProxy:
    """Forwards to ``upstream`` (a server's base URL); ``url`` is the proxy's own."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.url = ""
        self.seen: list[Seen] = []
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="losing-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._serving: set[asyncio.Task[None]] = set()

    def lose(self, method: str, path_end: str, times: int = 1, mode: Mode = "drop") -> None:
        """Lose the answers of the next ``times`` requests of ``method`` whose path ends with ``path_end``."""
        with self._lock:
            self._rules.append(_Rule(method, path_end, times, mode))

    def reset(self) -> None:
        """Forget the rules and the requests seen (between tests sharing the proxy)."""
        with self._lock:
            self._rules.clear()
            self.seen.clear()

    def requests(self, method: str, path_end: str) -> list[Seen]:
        """The requests seen of ``method`` whose path ends with ``path_end``, in order."""
        with self._lock:
            return [seen for seen in self.seen if seen.method == method and seen.path.endswith(path_end)]

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=30)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=HEAD_LIMIT)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _shut(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.gather(*self._serving, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # -- one client connection -------------------------------------------------------------------

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        writers = [to_client]
        self._writers.add(to_client)
        try:
            upstream, to_upstream = await asyncio.open_connection(*self._target, limit=HEAD_LIMIT)
            writers.append(to_upstream)
            self._writers.add(to_upstream)
            await self._relay(client, to_client, upstream, to_upstream)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return
        finally:
            for writer in writers:  # a lost answer: the client's connection drops, its answer unsent
                writer.transport.abort()
                self._writers.discard(writer)

    async def _relay(
        self,
        client: asyncio.StreamReader,
        to_client: asyncio.StreamWriter,
        upstream: asyncio.StreamReader,
        to_upstream: asyncio.StreamWriter,
    ) -> None:
        """Requests of one connection in turn; returns at its end, or once an answer was lost."""
        while (request := await _read(client, response_to=None)) is not None:
            rule = self._record(request)
            to_upstream.write(request.raw)
            await to_upstream.drain()
            answer = await _read(upstream, response_to=request.first_line.split(" ")[0])
            if answer is None:
                return
            if rule is not None:
                if rule.mode == "withhold":
                    await client.read()  # silent until the client gives up and closes
                return
            to_client.write(answer.raw)
            await to_client.drain()

    def _record(self, request: _Message) -> _Rule | None:
        method, target = request.first_line.split(" ")[:2]
        path = target.split("?", 1)[0]
        with self._lock:
            rule = next((r for r in self._rules if r.method == method and path.endswith(r.path_end)), None)
            if rule is not None:
                rule.times -= 1
                if rule.times == 0:
                    self._rules.remove(rule)
            self.seen.append(Seen(method, path, request.headers, rule is not None))
        return rule


async def _read(reader: asyncio.StreamReader, response_to: str | None) -> _Message | None:
    """One HTTP/1.1 message, as its raw bytes (to relay unchanged); None at a clean end of stream.
    ``response_to``: the request's method when this is its answer (a HEAD's answer has no body)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as short:
        if short.partial:
            raise
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:] if line)
    }
    message = _Message(head, b"", lines[0], headers)
    if response_to is not None and (response_to == "HEAD" or _bodiless(lines[0])):
        return message
    if headers.get("transfer-encoding", "").lower() == "chunked":
        message.body = await _chunks(reader)
    elif "content-length" in headers:
        message.body = await reader.readexactly(int(headers["content-length"]))
    elif response_to is not None:
        message.body = await reader.read()  # an answer that ends when the server closes
    return message


def _bodiless(status_line: str) -> bool:
    status = int(status_line.split(" ")[1])
    return status < 200 or status in (204, 304)


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    """A chunked body, framing included, up to and with its last (empty) chunk and trailers."""
    parts = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        parts.append(size_line)
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                parts.append(trailer)
            parts.append(trailer)
            return b"".join(parts)
        parts.append(await reader.readexactly(size + 2))


@contextlib.contextmanager
def losing_proxy(upstream: str) -> Iterator[LosingProxy]:
    """A started ``LosingProxy`` to ``upstream``, closed (its connections dropped) on exit."""
    proxy = LosingProxy(upstream)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
