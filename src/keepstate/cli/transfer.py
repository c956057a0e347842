"""``keepstate export`` and ``keepstate import``: move a store's records as JSON lines.

A progress counter shows on a terminal (standard error), never in the dump itself. Export only
reads, so it refuses a SQLite store that does not exist; an export cut short (Ctrl-C, a closed
pipe) says so and leaves a dump without its end line, which import refuses.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn

from ..transfer import BadDump, Tick, export_lines, load_dump, read_dump
from .failures import fail, quiet_libraries, store_errors
from .stores import check_store_option

STORE = click.option(
    "--store",
    envvar="KEEPSTATE_STORE",
    default="sqlite:///keepstate.db",
    show_default=True,
    help="Store URL (env KEEPSTATE_STORE).",
)


@contextmanager
def _progress(verb: str) -> Iterator[Tick | None]:
    """A live count of records on a terminal; nothing when standard error is not one."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}: {task.completed} records"), console=console, transient=False
    ) as progress:
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

    with quiet_libraries(), store_errors(store, "export"):
        check_store_option(store, must_exist=True)
        with _closed_output(), _progress("exporting") as tick:
            asyncio.run(run(tick))


@click.command(name="import")
@STORE
def import_(store: str) -> None:
    """Read a dump (from keepstate export) on standard input into a store."""
    with quiet_libraries(), store_errors(store, "import into"):
        check_store_option(store)
        try:
            with _progress("reading") as tick:
                checked = read_dump(sys.stdin.buffer, tick)
            with checked, _progress("importing") as tick:
                counts = asyncio.run(load_dump(store, checked, tick))
        except BadDump as error:
            fail(str(error))
    click.echo(f"imported {imported(counts)}", err=True)


NOUNS = {
    "ks_envs": "environment",
    "ks_keys": "key",
    "ks_sessions": "session",
    "ks_runs": "run",
    "ks_invocations": "invocation",
    "ks_session_agents": "session agent",
    "state": "state key",
    "document": "document",
}
"""What each kind of record is called in the import's summary, singular (``s`` makes the plural)."""


def imported(counts: dict[str, int]) -> str:
    """``1 environment, 2 keys, 3 documents``: the kinds in the dump's order, each counted in words."""
    order = [kind for kind in NOUNS if kind in counts] + sorted(set(counts) - set(NOUNS))
    parts = [f"{counts[kind]} {NOUNS.get(kind, kind)}{'' if counts[kind] == 1 else 's'}" for kind in order]
    return ", ".join(parts) or "no records"


@contextmanager
def _closed_output() -> Iterator[None]:
    """Standard output closed by its reader (``| head``): one line, and no second complaint from
    Python when it flushes standard output at exit."""
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        fail("standard output was closed before the dump was complete")
