"""The server's one error writer: every failed request is answered here, in the API's shape.

A ``KeepstateError`` becomes its JSON body and status (503 with ``Retry-After``, 405 with ``Allow``);
Starlette's own 404 and 405 become the same errors; anything else is a bug: logged, answered 500
``internal``. Store outages are counted for ``/metrics``.
"""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.responses import Response

from ..errors import InvalidRequest, KeepstateError, NotFound, Unavailable
from .http import json_response
from .metrics import Metrics

log = logging.getLogger("keepstate.server")


class MethodNotAllowed(InvalidRequest):
    """405: the path has other methods, listed in ``allow`` (and the ``Allow`` header)."""

    status = 405

    def __init__(self, allow: str) -> None:
        super().__init__("Method Not Allowed", allow=allow)


def error_response(error: BaseException, method: str, path: str, metrics: Metrics) -> Response:
    """The answer to a request that raised ``error``."""
    if isinstance(error, HTTPException):
        error = _from_starlette(error)
    if not isinstance(error, KeepstateError) or (error.status >= 500 and not isinstance(error, Unavailable)):
        log.error("internal error on %s %s", method, path, exc_info=error)
        return json_response({"error": "internal", "message": "internal server error"}, 500)
    headers = None
    if isinstance(error, Unavailable):
        metrics.store_errors.inc()
        headers = {"Retry-After": str(error.retry_after)}
    elif isinstance(error, MethodNotAllowed):
        headers = {"Allow": error.details["allow"]}
    return json_response(error.to_dict(), error.status, headers)


def _from_starlette(error: HTTPException) -> KeepstateError:
    if error.status_code == 405:
        return MethodNotAllowed(dict(error.headers or {}).get("Allow", ""))
    if error.status_code == 404:
        return NotFound(str(error.detail))
    return InvalidRequest(str(error.detail))
