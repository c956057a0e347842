"""One worker process of the booking example: an HTTP endpoint over the shared session store.

    python examples/booking/worker.py --store sqlite:///booking.db --ledger bookings.jsonl --port 8601

``POST /sessions/{id}/messages`` with ``{"text": ..., "context": {...}}`` → ``{"reply": ...}``.
Any worker can continue any session: the state lives in the store, not in the process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).parent))
from booking import Supplier, handle

from keepstate import KeepstateError
from keepstate.sessions import open_session_store


def app(store_url: str, ledger: Path) -> Starlette:
    store = open_session_store(store_url, lease_seconds=5, wait_timeout=30)
    supplier = Supplier(ledger)

    async def message(request: Request) -> JSONResponse:
        body = await request.json()
        try:
            reply = await handle(store, supplier, request.path_params["sid"], body["text"], body.get("context", {}))
        except KeepstateError as error:
            return JSONResponse(error.to_dict(), status_code=error.status)
        return JSONResponse({"reply": reply})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/sessions/{sid}/messages", message, methods=["POST"]), Route("/health", health)])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--ledger", required=True, type=Path)
    parser.add_argument("--port", type=int, default=8601)
    args = parser.parse_args()
    uvicorn.run(app(args.store, args.ledger), host="127.0.0.1", port=args.port, log_level="warning")
