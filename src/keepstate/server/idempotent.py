"""Idempotent writes over HTTP: the ``Idempotency-Key`` header (``http-api.md``, "Idempotent writes").

A write route hands its effect (``work``) and how its result becomes the answer (``render``) to
``answer_once``. Without the header that is the write and its answer, as before. With it, the key is
scoped to the caller (``key:<id>``, or ``token:<hash>`` for a run token) and the request is
fingerprinted (method, path with query, body): a key that already answered the same request answers
it again with ``Idempotent-Replayed: true`` and writes nothing; one that answered another request is
422 ``idempotency_mismatch``; otherwise the store runs the write and keeps its answer in one atomic
step (``PlatformFacet.remember``). A refused write changed nothing; its answer is kept too, so a
repeat is refused alike rather than judged again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from ..clock import now_ms
from ..errors import IdempotencyInFlight, IdempotencyMismatch, InvalidRequest, KeepstateError
from ..platform import auth
from ..platform.models import Caller
from ..protocol import IDEMPOTENCY_KEY_HEADER
from ..stores.base import PlatformFacet
from ..stores.remembered import Answer, Memo, Remembered
from ..values import is_key
from .http import JSON, read_body

T = TypeVar("T")
HEADER = IDEMPOTENCY_KEY_HEADER
REPLAYED = "Idempotent-Replayed"

Render = Callable[[Any], Answer | None]
"""A write's answer from what the store's write returned; None when it wrote nothing (a refusal follows)."""


class Replayed(Exception):
    """The answer a key already holds, to be sent as it was with ``Idempotent-Replayed: true``."""

    def __init__(self, answer: Answer) -> None:
        super().__init__("replayed")
        self.answer = answer


def idempotency_key(header: str | None) -> str | None:
    """The header's key, None without one; 400 ``invalid_request`` when it is not 1-200 of the key charset."""
    if header is None:
        return None
    if not is_key(header):
        raise InvalidRequest("Idempotency-Key must be 1-200 of A-Z a-z 0-9 . _ : -")
    return header


def key_caller(caller: Caller) -> str:
    return f"key:{caller.key_id}"


def token_caller(token: str | None) -> str | None:
    """A run token's scope: its hash (the token proves it; the invocation may have ended since)."""
    return None if not token else f"token:{auth.hash_secret(token)}"


def fingerprint(scope: Scope, body: bytes) -> bytes:
    """What a repeat must match: the method, the raw path with its query, and the body."""
    target = scope.get("raw_path") or scope["path"].encode()
    return hashlib.sha256(b"%s %s?%s\n%s" % (scope["method"].encode(), target, scope["query_string"], body)).digest()


def error_answer(error: KeepstateError) -> Answer:
    return Answer(error.status, orjson.dumps(error.to_dict()))


def _kept(error: KeepstateError) -> bool:
    """A refusal worth remembering: the request's own fault, not the moment's (outage, a key in flight)."""
    return 400 <= error.status < 500 and not isinstance(error, IdempotencyInFlight) and error.status != 429


def _same(found: Remembered, print_: bytes) -> Answer:
    if found.fingerprint != print_:
        raise IdempotencyMismatch("this Idempotency-Key was used for another request: use a new key for a new write")
    return found.answer


async def answer_once(
    repo: PlatformFacet,
    caller: str,
    key: str,
    print_: bytes,
    work: Callable[[], Awaitable[T]],
    render: Render,
    one_write: bool = False,
) -> Answer:
    """The write's answer, from running it once with its answer kept; ``Replayed`` when the key had one."""
    memo = Memo(caller, key, print_, render, one_write)
    try:
        result = await repo.remember(memo, work)
    except KeepstateError as error:
        if _kept(error):
            await repo.keep(memo, error_answer(error), now_ms())
        raise
    if isinstance(result, Remembered):
        raise Replayed(_same(result, print_))
    answer = render(result)
    assert answer is not None, "a write that returned normally has an answer"
    return answer


# -- the routes of Starlette requests (``routes.py``, ``event_routes.py``) -----------------------


def replayed_response(answer: Answer) -> Response:
    headers = {REPLAYED: "true"}
    if answer.status == 204:
        return Response(status_code=204, headers=headers)
    return Response(answer.body, answer.status, headers, media_type=JSON)


def answered_response(answer: Answer) -> Response:
    return Response(status_code=204) if answer.status == 204 else Response(answer.body, answer.status, media_type=JSON)


async def respond_once(
    request: Request,
    repo: PlatformFacet,
    caller: str | None,
    body: bytes,
    work: Callable[[], Awaitable[T]],
    render: Render,
    one_write: bool = False,
) -> Response:
    """The response to a write route: ``work`` rendered, run once per ``Idempotency-Key`` when one is sent
    (``caller``: whose keys, given whenever one is; ``one_write``: ``Memo.one_write``)."""
    key = idempotency_key(request.headers.get(HEADER))
    if key is None:
        answer = render(await work())
        assert answer is not None
        return answered_response(answer)
    assert caller is not None, "a keyed write names whose key it is"
    try:
        print_ = fingerprint(request.scope, body)
        return answered_response(await answer_once(repo, caller, key, print_, work, render, one_write))
    except Replayed as replayed:
        return replayed_response(replayed.answer)


async def replayed_early(request: Request, repo: PlatformFacet, caller: str | None, render: Render) -> Response | None:
    """A run token's repeat answered before the route checks the token, which a finished invocation's
    token no longer passes: the remembered answer (``render``: the route's, for a raw one), or None to go
    on (the body is read only on a hit)."""
    key = idempotency_key(request.headers.get(HEADER))
    if key is None or caller is None:
        return None
    found = await repo.recall(caller, key)
    if found is None:
        return None
    print_ = fingerprint(request.scope, await read_body(request))
    return replayed_response(_same(repo.rendered(Memo(caller, key, print_, render), found), print_))


def json_answer(content: Any, status: int = 200) -> Answer:
    return Answer(status, orjson.dumps(content))
