"""``keepstate serve``: the HTTP API under uvicorn (uvloop, httptools), one or several processes.

Flags win over ``KEEPSTATE_*`` variables. With one process the bootstrap admin key is handled at
startup; with ``--workers N`` it is handled once here, before the workers start, and each worker
builds its app from the environment. SIGTERM stops gracefully: uvicorn finishes in-flight
requests, then the app's shutdown closes the store.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import click


@click.command()
@click.option("--store", envvar="KEEPSTATE_STORE", default="sqlite:///keepstate.db", show_default=True,
              help="Store URL: sqlite:///file.db, postgresql://..., or memory:// (env KEEPSTATE_STORE).")
@click.option("--host", envvar="KEEPSTATE_HOST", default="127.0.0.1", show_default=True)
@click.option("--port", envvar="KEEPSTATE_PORT", default=8420, type=click.IntRange(0, 65535), show_default=True)
@click.option("--workers", default=1, type=click.IntRange(1, 64), show_default=True, help="Server processes.")
@click.option(
    "--invocation-lease", "lease", envvar="KEEPSTATE_INVOCATION_LEASE", default=30.0,
    type=click.FloatRange(0.1, 3600), show_default=True, help="Seconds an invocation lives without a heartbeat.",
)
@click.option("--no-console", "no_console", is_flag=True, envvar="KEEPSTATE_NO_CONSOLE",
              help="Do not serve the web console at /console/.")
def serve(store: str, host: str, port: int, workers: int, lease: float, no_console: bool) -> None:
    """Serve the HTTP API (and the web console at /console/)."""
    import uvicorn

    from ..errors import KeepstateError
    from ..stores import capabilities_of

    try:
        declared = capabilities_of(store)
        declared.require("platform", store)
    except (ValueError, KeepstateError) as error:
        raise click.BadParameter(str(error), param_hint="--store") from None
    admin_key = os.environ.get("KEEPSTATE_ADMIN_KEY") or None
    options: dict[str, Any] = {"host": host, "port": port, "loop": "uvloop", "http": "httptools", "access_log": False,
               "log_level": "warning", "timeout_graceful_shutdown": 10}
    console = "" if no_console else f", the console at http://{host}:{port}/console/"
    click.echo(f"keepstate: serving http://{host}:{port} over {store}{console}", err=True)
    if workers == 1:
        from ..server.app import create_app

        uvicorn.run(create_app(store, lease, bootstrap_admin=True, admin_key=admin_key, console=not no_console),
                    **options)
        return
    if not declared.shared:
        raise click.BadParameter("a memory:// store lives in one process: use --workers 1", param_hint="--workers")
    asyncio.run(_bootstrap(store, admin_key))
    os.environ.update({"KEEPSTATE_STORE": store, "KEEPSTATE_INVOCATION_LEASE": str(lease),
                       "KEEPSTATE_CONSOLE": "0" if no_console else "1"})
    uvicorn.run("keepstate.server.app:app_from_env", factory=True, workers=workers, **options)


async def _bootstrap(store: str, admin_key: str | None) -> None:
    from ..platform import open_platform
    from ..server.bootstrap import bootstrap

    platform = await open_platform(store)
    try:
        await bootstrap(platform, admin_key)
    finally:
        await platform.aclose()
