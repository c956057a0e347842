"""A Server-Sent Events client for the tests: a stream read on a thread of its own into a queue.

``Stream.next()`` gives each message (``Message``: its ``id``, ``event`` and parsed ``data``) or comment
line in order, and None once the server ended the stream. Waits are bounded only to catch a hang.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

HANG_S = 60.0


@dataclass(frozen=True)
class Message:
    id: int | None = None
    event: str | None = None
    data: Any = None
    comment: str | None = None


class Stream:
    """``GET path`` with ``Accept: text/event-stream``, read on a thread; close it when done."""

    def __init__(self, base_url: str, path: str, headers: dict[str, str], params: dict[str, Any] | None = None):
        self._client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(10.0, read=None))
        self._queue: queue.Queue[Message | BaseException | None] = queue.Queue()
        self._request = self._client.build_request(
            "GET", path, headers={**headers, "Accept": "text/event-stream"}, params=params
        )
        self.status: int | None = None
        self.headers: httpx.Headers | None = None
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self._opened.wait(HANG_S), "the stream never answered"

    def _read(self) -> None:
        try:
            response = self._client.send(self._request, stream=True)
            self.status, self.headers = response.status_code, response.headers
            self._opened.set()
            fields: dict[str, str] = {}
            for line in response.iter_lines():
                if line.startswith(":"):
                    self._queue.put(Message(comment=line[1:].strip()))
                elif line:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
                elif fields:
                    self._queue.put(message(fields))
                    fields = {}
            response.close()
        except BaseException as error:  # the test reads it from the queue
            self._opened.set()
            self._queue.put(error)
            return
        self._queue.put(None)

    def next(self, timeout: float = HANG_S) -> Message | None:
        item = self._queue.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    def events(self, count: int) -> list[Message]:
        """The next ``count`` messages, comments skipped (within ``HANG_S`` in all)."""
        found: list[Message] = []
        give_up = time.monotonic() + HANG_S
        while len(found) < count:
            item = self.next(max(0.0, give_up - time.monotonic()))
            assert item is not None, f"the stream ended after {found}"
            if item.comment is None:
                found.append(item)
        return found

    def rest(self) -> list[Message]:
        """Every message until the server ends the stream, comments skipped (within ``HANG_S`` in all)."""
        found: list[Message] = []
        give_up = time.monotonic() + HANG_S
        while (item := self.next(max(0.0, give_up - time.monotonic()))) is not None:
            if item.comment is None:
                found.append(item)
        return found

    def close(self) -> None:
        self._client.close()
        self._thread.join(HANG_S)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def message(fields: dict[str, str]) -> Message:
    return Message(int(fields["id"]) if "id" in fields else None, fields.get("event"), orjson.loads(fields["data"]))
