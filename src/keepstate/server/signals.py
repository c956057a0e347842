"""Ending open event streams when the server is asked to stop.

uvicorn stops gracefully: it stops accepting, then waits for open responses to finish before the app's
shutdown runs. An event stream would not finish by itself, so every stop would wait out the whole grace
period. While the app runs, SIGINT and SIGTERM first tell ``end`` (which ends the streams: their clients
connect again, to this server once it is back or to another, from their last ``seq``) and then do what
they did before (uvicorn's graceful exit). Outside the main thread (an app driven in-process) nothing is
changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def on_exit_signals(end: Callable[[], None]) -> Iterator[None]:
    """While the block runs, the exit signals call ``end`` on this event loop before their own handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    before: dict[int, Any] = {int(sig): signal.getsignal(sig) for sig in SIGNALS}

    def chained(sig: int, frame: FrameType | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing is left to end
            loop.call_soon_threadsafe(end)
        handler = before[sig]
        if callable(handler):
            handler(sig, frame)
        elif handler == signal.SIG_DFL:  # what the signal did before: do it
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)

    for sig in SIGNALS:
        signal.signal(sig, chained)
    try:
        yield
    finally:
        for number, handler in before.items():
            if signal.getsignal(number) is chained:
                signal.signal(number, handler)
