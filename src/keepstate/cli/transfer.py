"""``keepstate export`` and ``keepstate import``: move a store's records as JSON lines.

A progress counter shows on a terminal (standard error), never in the dump itself.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn

from ..transfer import Tick, export_lines, import_lines

T = TypeVar("T")
STORE = click.option("--store", envvar="KEEPSTATE_STORE", default="sqlite:///keepstate.db", show_default=True,
                     help="Store URL (env KEEPSTATE_STORE).")


@contextmanager
def _progress(verb: str) -> Iterator[Tick | None]:
    """A live count of records on a terminal; nothing when standard error is not one."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}: {task.completed} records"),
                  console=console, transient=False) as progress:
        task = progress.add_task(verb, total=None)
        yield lambda _kind: progress.advance(task)


@click.command()
@STORE
def export(store: str) -> None:
    """Write every record of a store to standard output as JSON lines."""
    out = sys.stdout.buffer

    async def run(tick: Tick | None) -> None:
        async for line in export_lines(store, tick):
            out.write(line + b"\n")
        out.flush()

    with _progress("exporting") as tick:
        _run(run(tick))


@click.command(name="import")
@STORE
def import_(store: str) -> None:
    """Read a dump (from keepstate export) on standard input into a store."""
    with _progress("importing") as tick:
        counts = _run(import_lines(store, sys.stdin.buffer, tick))
    summary = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items())) or "nothing"
    click.echo(f"imported {summary}", err=True)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run the transfer; a bad dump or store becomes a one-line error, not a traceback."""
    try:
        return asyncio.run(coro)
    except ValueError as error:
        raise click.ClickException(str(error)) from None
