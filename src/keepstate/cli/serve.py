"""``keepstate serve``: the HTTP API under uvicorn (uvloop, httptools), one or several processes.

Flags win over ``KEEPSTATE_*`` variables. The order of the start is what the spec asks: refuse a
weak ``KEEPSTATE_ADMIN_KEY`` and a bad store URL, then bind the port (uvicorn is handed the bound
socket), and only then open the store and make sure of the bootstrap admin key — so a port in
use or a bad flag never creates a store file or prints a key. Each failure is one line.

The bootstrap happens here, before uvicorn starts, for every store shared between processes; a
``memory://`` store lives only in the serving process, so its app does it at startup. With ``--workers N`` each worker
builds its app from the environment. SIGTERM stops gracefully: uvicorn finishes in-flight
requests, then the app's shutdown closes the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import sys
from typing import Any

import click

from ..clock import MAX_AGE_DAYS
from .failures import fail, quiet_libraries, redact, store_errors
from .numbers import Finite
from .stores import check_store_option

EPILOG = """\b
The admin key:
  KEEPSTATE_ADMIN_KEY=KEY makes KEY an admin key of environment 'default'
  at start (128 random bits or more; make one with
  python -c "import secrets; print('ks_' + secrets.token_urlsafe(32))").
  Without it, the first start on an empty store creates one and prints it
  once. Lost it? Make another on the store itself, no server needed:
    keepstate keys create --role admin --store URL
  then revoke the old one (keepstate keys list / keys revoke ID).
"""

BACKLOG = 2048
STARTUP_FAILURE = 3
"""uvicorn's exit status when the app cannot start."""


@click.command(epilog=EPILOG)
@click.option(
    "--store",
    envvar="KEEPSTATE_STORE",
    default="sqlite:///keepstate.db",
    show_default=True,
    help="Store URL: sqlite:///file.db, postgresql://..., or memory:// (env KEEPSTATE_STORE).",
)
@click.option("--host", envvar="KEEPSTATE_HOST", default="127.0.0.1", show_default=True)
@click.option("--port", envvar="KEEPSTATE_PORT", default=8420, type=click.IntRange(0, 65535), show_default=True)
@click.option("--workers", default=1, type=click.IntRange(1, 64), show_default=True, help="Server processes.")
@click.option(
    "--invocation-lease",
    "lease",
    envvar="KEEPSTATE_INVOCATION_LEASE",
    default=30.0,
    type=Finite(0.1, 3600),
    show_default=True,
    help="Seconds an invocation lives without a heartbeat.",
)
@click.option(
    "--queue-timeout",
    envvar="KEEPSTATE_QUEUE_TIMEOUT",
    default=600.0,
    type=Finite(1, 86_400),
    show_default=True,
    help="Seconds a run may stay queued before it expires, unless it sets its own.",
)
@click.option(
    "--retention-days",
    envvar="KEEPSTATE_RETENTION_DAYS",
    default=None,
    type=Finite(0, MAX_AGE_DAYS, low_open=True),
    help="Purge finished runs older than this many days, in the background (default: keep them).",
)
@click.option(
    "--embedder",
    envvar="KEEPSTATE_EMBEDDER",
    default=None,
    help="Search memory by meaning too: 'local' (pip install 'keepstate[embed]') or module:callable "
    "(env KEEPSTATE_EMBEDDER).",
)
@click.option(
    "--no-console",
    "no_console",
    is_flag=True,
    envvar="KEEPSTATE_NO_CONSOLE",
    help="Do not serve the web console at /console/.",
)
def serve(
    store: str,
    host: str,
    port: int,
    workers: int,
    lease: float,
    queue_timeout: float,
    retention_days: float | None,
    embedder: str | None,
    no_console: bool,
) -> None:
    """Serve the HTTP API (and the web console at /console/)."""
    admin_key = _admin_key()
    shared = _check(store, workers)
    _check_embedder(embedder)
    sock = bind(host, port)
    app_options = {
        "queue_timeout": queue_timeout,
        "retention_days": retention_days,
        "console": not no_console,
        "embedder": embedder,
    }
    try:
        if shared:
            with quiet_libraries(), store_errors(store, "serve"):
                asyncio.run(_bootstrap(store, admin_key))
        address = _address(host, sock)
        console = "" if no_console else f", the console at {address}/console/"
        click.echo(f"keepstate: serving {address} over {redact(store)}{console}", err=True)
        _run(store, lease, workers, sock, app_options, bootstrap_admin=not shared, admin_key=admin_key)
    finally:
        sock.close()


def _admin_key() -> str | None:
    """``KEEPSTATE_ADMIN_KEY``, refused when it is too weak to be a key."""
    from ..server.bootstrap import check_admin_key

    admin_key = os.environ.get("KEEPSTATE_ADMIN_KEY") or None
    if admin_key is not None:
        try:
            check_admin_key(admin_key)
        except ValueError as error:
            fail(str(error))
    return admin_key


def _check(store: str, workers: int) -> bool:
    """Whether the store is shared between processes, once the URL and the flags are known to fit."""
    from ..errors import KeepstateError
    from ..stores import capabilities_of

    with store_errors(store, "serve"):
        check_store_option(store)
    declared = capabilities_of(store)
    try:
        declared.require("platform", store)
    except KeepstateError as error:
        raise click.BadParameter(error.message, param_hint="--store") from None
    if workers > 1 and not declared.shared:
        raise click.BadParameter(f"{redact(store)} lives in one process: use --workers 1", param_hint="--workers")
    return declared.shared


def _check_embedder(spec: str | None) -> None:
    """Load the embedder once before binding, so a bad spec or a missing extra is one line and no store."""
    from ..embedders import load_embedder
    from ..errors import KeepstateError

    try:
        load_embedder(spec)
    except KeepstateError as error:
        raise click.BadParameter(error.message, param_hint="--embedder") from None


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening, as uvicorn would make it; one line if it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as error:
        sock.close()
        fail(f"cannot listen on {host}:{port}: {_bind_reason(error)}")
    sock.set_inheritable(True)  # --workers: the worker processes serve on this very socket
    return sock


def _bind_reason(error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return "the port is already in use (another keepstate serve?): stop it or choose another --port"
    if error.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges): choose another --port"
    return error.strerror or str(error)


def _address(host: str, sock: socket.socket) -> str:
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _run(
    store: str, lease: float, workers: int, sock: socket.socket, app_options: dict[str, Any], **bootstrap: Any
) -> None:
    """uvicorn on the bound socket: this process, or ``workers`` processes sharing it; ``app_options`` holds
    ``create_app``'s queue_timeout, retention_days, console and embedder (the environment carries them to workers)."""
    import uvicorn

    options: dict[str, Any] = {
        "loop": "uvloop",
        "http": "httptools",
        "access_log": False,
        "log_level": "warning",
        "timeout_graceful_shutdown": 10,
    }
    if workers == 1:
        from ..server.app import create_app

        server = uvicorn.Server(uvicorn.Config(create_app(store, lease, **app_options, **bootstrap), **options))
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[sock])
        if not server.started:
            sys.exit(STARTUP_FAILURE)
        return
    from uvicorn.supervisors import Multiprocess

    os.environ.update(
        {
            "KEEPSTATE_STORE": store,
            "KEEPSTATE_INVOCATION_LEASE": str(lease),
            "KEEPSTATE_QUEUE_TIMEOUT": str(app_options["queue_timeout"]),
            "KEEPSTATE_CONSOLE": "1" if app_options["console"] else "0",
        }
    )
    if app_options["retention_days"] is not None:
        os.environ["KEEPSTATE_RETENTION_DAYS"] = str(app_options["retention_days"])
    if app_options["embedder"] is not None:
        os.environ["KEEPSTATE_EMBEDDER"] = app_options["embedder"]
    config = uvicorn.Config("keepstate.server.app:app_from_env", factory=True, workers=workers, **options)
    Multiprocess(config, sockets=[sock]).run()


async def _bootstrap(store: str, admin_key: str | None) -> None:
    from ..platform import open_platform
    from ..server.bootstrap import bootstrap

    platform = await open_platform(store)
    try:
        await bootstrap(platform, admin_key)
    finally:
        await platform.aclose()
