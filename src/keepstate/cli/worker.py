"""``keepstate worker MODULE[:WORKER]``: import a module and run the ``Worker`` (or ``AsyncWorker``) in it.

The module is imported with the current directory on ``sys.path``, as ``python -m`` would. The
command's ``--url``/``--key``/``--concurrency`` — or, without flags, ``KEEPSTATE_URL`` and
``KEEPSTATE_KEY`` — override what the module passed to the constructor, so one module runs
against any server. The first Ctrl-C / SIGTERM lets the invocations in flight finish; a second
one interrupts them.

Before it claims anything the command checks that a keepstate server answers at the URL, so a
server that is down or a URL that is wrong is one line and exit status 1 rather than a worker
retrying quietly; once it is claiming, the worker rides out outages, retrying with backoff. Logs:
one line when it starts claiming and one per invocation (done, held, failed) at INFO; httpx's
line per request only with ``--log-level DEBUG``.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from typing import Any

import click

from ..protocol import MAX_CLAIM_WAIT_S
from .failures import INTERRUPTED, fail
from .numbers import Finite, whole

MAX_CONCURRENCY = 1000
"""The most invocations one ``keepstate worker`` process runs at the same time."""

HTTP_LOGGERS = ("httpx", "httpcore")
PROBE_TIMEOUT_S = 5.0


def _find(target: str) -> Any:
    """The worker object named by ``MODULE:ATTRIBUTE``, or the only worker in ``MODULE``."""
    from ..client import AsyncWorker, Worker

    module_name, _, attribute = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except (ImportError, ValueError) as error:  # ValueError: the module's Worker(...) got a malformed URL
        raise click.BadParameter(f"cannot import {module_name!r}: {error}", param_hint="MODULE:WORKER") from None
    if attribute:
        found = getattr(module, attribute, None)
        if not isinstance(found, Worker | AsyncWorker):
            raise click.BadParameter(f"{target!r} is not a keepstate Worker or AsyncWorker", param_hint="MODULE:WORKER")
        return found
    workers = [value for value in vars(module).values() if isinstance(value, Worker | AsyncWorker)]
    if len(workers) != 1:
        raise click.BadParameter(
            f"{module_name!r} holds {len(workers)} workers: name one as MODULE:WORKER", param_hint="MODULE:WORKER"
        )
    return workers[0]


@click.command()
@click.argument("target", metavar="MODULE:WORKER")
@click.option(
    "--concurrency",
    "-c",
    type=whole(1, MAX_CONCURRENCY),
    default=None,
    help="Invocations run at the same time (default: the worker's own, 1).",
)
@click.option("--url", envvar="KEEPSTATE_URL", default=None, help="Server base URL (env KEEPSTATE_URL).")
@click.option("--key", envvar="KEEPSTATE_KEY", default=None, help="A worker key (env KEEPSTATE_KEY).")
@click.option(
    "--poll",
    type=Finite(0, MAX_CLAIM_WAIT_S),
    default=None,
    help="Seconds one claim long-poll waits (default 10); also the longest a stop waits for an idle worker.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def worker(
    target: str, concurrency: int | None, url: str | None, key: str | None, poll: float | None, log_level: str
) -> None:
    """Run the agent functions of MODULE:WORKER against a keepstate server."""
    from ..client import AsyncWorker
    from ..errors import KeepstateError

    _configure_logging(log_level.upper())
    if url:
        _check_url(url)
        os.environ["KEEPSTATE_URL"] = url  # the flag wins over the environment, also in the module's Worker()
    found = _find(target)
    found.configure(base_url=url, key=key, concurrency=concurrency)
    if poll is not None:
        found.settings.claim_wait = poll
    _probe(found.settings.config().base_url)
    try:
        handled = asyncio.run(found.run()) if isinstance(found, AsyncWorker) else found.run()
    except KeepstateError as error:
        fail(f"{error.code}: {error.message}")
    except (KeyboardInterrupt, asyncio.CancelledError):
        click.echo("interrupted", err=True)
        sys.exit(INTERRUPTED)
    click.echo(f"stopped after {handled} invocation(s)", err=True)


def _check_url(url: str) -> None:
    from ..client._core import check_base_url

    try:
        check_base_url(url, "the server URL")
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--url") from None


def _configure_logging(level: str) -> None:
    """The worker's own lines at ``level``; httpx's line per request only when debugging."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if level != "DEBUG":
        for name in HTTP_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def _probe(base_url: str) -> None:
    """Exit with one line unless a keepstate server answers ``GET /healthz`` at ``base_url``."""
    import httpx

    try:
        answer = httpx.get(f"{base_url}/healthz", timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as error:
        fail(f"cannot reach keepstate at {base_url}: {error or type(error).__name__} (is keepstate serve running?)")
    if answer.status_code != 200:
        fail(f"no keepstate server answers at {base_url}: GET /healthz gave HTTP {answer.status_code}")
