"""Memory's requests as ``Call``s, and the ``MemoryOps`` that send them (sync and async).

One set of builders serves every prefix: ``/v0/memory`` with an invocation's run token, and the
admin routes (``/v0/agents/{agent}/memory``, ``/v0/users/{user}/memory/{agent}``) with the client's
key; a ``MemoryTarget`` says which. A path is sent segment by segment, each percent-encoded, so its
``/`` stay separators, ``{user}`` arrives as written, and a ``.`` or ``..`` segment is sent encoded
(the HTTP library would otherwise resolve it away) for the server to refuse, never to resolve.
Reads and guarded writes are safe to repeat; an unguarded write or delete is not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import InvalidRequest
from ..memory import AsyncMemoryOps, Document, DocumentInfo, Hit, ListPage, MemoryOps
from ..scope import check_if_version
from ._core import Call, _none, body, query, segment


@dataclass(frozen=True, slots=True)
class MemoryTarget:
    """Where one view of memory lives: its prefix, and the run token (None: the client's key)."""

    prefix: str
    token: str | None = None

    def call(self, method: str, path: str, parse: Callable[[Any], Any], **extra: Any) -> Call[Any]:
        return Call(method, path, parse, auth="key" if self.token is None else "token", token=self.token, **extra)

    def document(self, path: str) -> str:
        if not isinstance(path, str) or not path:
            raise InvalidRequest("path must be 1-512 of A-Z a-z 0-9 . _ - / in segments, like notes/today")
        return f"{self.prefix}/" + "/".join(segment(part) for part in path.split("/"))


def run_target(token: str) -> MemoryTarget:
    return MemoryTarget("/v0/memory", token)


def caller_target(*parts: str) -> MemoryTarget:
    """``caller_target("agents", agent, "memory")`` → ``/v0/agents/{agent}/memory``, with the client's key."""
    return MemoryTarget("/v0/" + "/".join(segment(part) for part in parts))


M = TypeVar("M")


class CallerMemory(Generic[M]):
    """``client.memory``: an agent's memory read and written with the client's key (admins, as the API's
    ``/v0/agents/{agent}/memory`` and ``/v0/users/{user}/memory/{agent}``), to seed a knowledge base
    from a backend, read what an agent filed, or act as one end user. It hands out the same ``Memory``
    (``AsyncMemory`` from ``AsyncClient``) as an agent's ``inv.memory``; a member gets ``Forbidden``.
    One class for both clients: ``make`` makes the face's memory over a target."""

    def __init__(self, make: Callable[[MemoryTarget], M]) -> None:
        self._make = make

    def agent(self, agent: str) -> M:
        """Every folder of ``agent``'s memory: the shared documents and each end user's ``users/{user}/``."""
        return self._make(caller_target("agents", agent, "memory"))

    def user(self, user: str, agent: str) -> M:
        """``agent``'s memory as end user ``user`` sees it: the shared documents and ``users/{user}/``
        (writable only there, as for one of that user's runs)."""
        return self._make(caller_target("users", user, "memory", agent))


def read(target: MemoryTarget, path: str) -> Call[Document | None]:
    return target.call("GET", target.document(path), Document.from_dict, safe=True, absent=lambda: None)


def write(
    target: MemoryTarget, path: str, text: str, metadata: dict[str, Any] | None, if_version: int | None
) -> Call[int]:
    guard = check_if_version(if_version)
    content = body({"text": text, "metadata": metadata, "if_version": guard})
    return target.call(
        "PUT", target.document(path), lambda answer: int(answer["version"]), content=content, safe=guard is not None
    )


def delete(target: MemoryTarget, path: str, if_version: int | None) -> Call[None]:
    guard = check_if_version(if_version)
    return target.call("DELETE", target.document(path), _none, params=query(if_version=guard), safe=guard is not None)


def list_page(target: MemoryTarget, prefix: str, after: str, limit: int) -> Call[ListPage]:
    def parse(answer: Any) -> ListPage:
        return [DocumentInfo.from_dict(item) for item in answer.get("documents", [])], answer.get("next")

    params = query(prefix=prefix or None, after=after or None, limit=limit)
    return target.call("GET", target.prefix, parse, params=params, safe=True)


def search(
    target: MemoryTarget, text: str, prefix: str | None, limit: int, mode: str | None, filter: dict[str, Any] | None
) -> Call[list[Hit]]:
    def parse(answer: Any) -> list[Hit]:
        return [Hit.from_dict(item) for item in answer.get("hits", [])]

    content = body({"query": text, "prefix": prefix, "limit": limit, "mode": mode, "filter": filter})
    return target.call("POST", f"{target.prefix}/search", parse, content=content, safe=True)


class HttpMemoryOps(MemoryOps):
    """``MemoryOps`` over HTTP."""

    def __init__(self, send: Callable[[Call[Any]], Any], target: MemoryTarget) -> None:
        self._send, self._target = send, target

    def read(self, path: str) -> Document | None:
        found: Document | None = self._send(read(self._target, path))
        return found

    def write(self, path: str, text: str, metadata: dict[str, Any] | None, if_version: int | None) -> int:
        version: int = self._send(write(self._target, path, text, metadata, if_version))
        return version

    def delete(self, path: str, if_version: int | None) -> None:
        self._send(delete(self._target, path, if_version))

    def list_page(self, prefix: str, after: str, limit: int) -> ListPage:
        page: ListPage = self._send(list_page(self._target, prefix, after, limit))
        return page

    def search(
        self, query: str, prefix: str | None, limit: int, mode: str | None, filter: dict[str, Any] | None
    ) -> list[Hit]:
        hits: list[Hit] = self._send(search(self._target, query, prefix, limit, mode, filter))
        return hits


class AsyncHttpMemoryOps(AsyncMemoryOps):
    """``AsyncMemoryOps`` over HTTP."""

    def __init__(self, send: Callable[[Call[Any]], Awaitable[Any]], target: MemoryTarget) -> None:
        self._send, self._target = send, target

    async def read(self, path: str) -> Document | None:
        found: Document | None = await self._send(read(self._target, path))
        return found

    async def write(self, path: str, text: str, metadata: dict[str, Any] | None, if_version: int | None) -> int:
        version: int = await self._send(write(self._target, path, text, metadata, if_version))
        return version

    async def delete(self, path: str, if_version: int | None) -> None:
        await self._send(delete(self._target, path, if_version))

    async def list_page(self, prefix: str, after: str, limit: int) -> ListPage:
        page: ListPage = await self._send(list_page(self._target, prefix, after, limit))
        return page

    async def search(
        self, query: str, prefix: str | None, limit: int, mode: str | None, filter: dict[str, Any] | None
    ) -> list[Hit]:
        hits: list[Hit] = await self._send(search(self._target, query, prefix, limit, mode, filter))
        return hits
