"""``keepstate memory reindex``: embed the documents not embedded with the current embedder.

After a change of embedder (another model, another dimension) every document waits for its new
vectors, and until it has them a search by meaning skips it; documents written while the embedder
was failing wait too. ``reindex`` embeds them, ``BATCH`` at a time (each batch its own short
transaction, so servers serving the same store keep serving), with a progress bar on a terminal.
A document written meanwhile is embedded by its own write. Nothing is created: the store must exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from .failures import quiet_libraries, store_errors
from .stores import NEVER_CREATES, check_store_option

if TYPE_CHECKING:
    from ..embedders import Embedder


@click.group()
def memory() -> None:
    """Agents' memory: keep its search by meaning up to date."""


@memory.command()
@click.option(
    "--store",
    envvar="KEEPSTATE_STORE",
    default="sqlite:///keepstate.db",
    show_default=True,
    help="Store URL (env KEEPSTATE_STORE).",
)
@click.option(
    "--embedder",
    envvar="KEEPSTATE_EMBEDDER",
    required=True,
    help="The embedder the servers use: 'local' or module:callable (env KEEPSTATE_EMBEDDER).",
)
@click.option("--agent", default=None, help="Only this agent's memory (default: every agent's).")
@click.option("--env", "env", default="default", show_default=True, help="The environment of --agent.")
def reindex(store: str, embedder: str, agent: str | None, env: str) -> None:
    """Embed every document not embedded with --embedder, in batches, while servers serve."""
    from ..embedders import load_embedder
    from ..errors import KeepstateError
    from ..memory_rules import space_of
    from ..stores import capabilities_of

    with quiet_libraries(), store_errors(store, "reindex"):
        check_store_option(store, must_exist=True, why=NEVER_CREATES)
        try:
            capabilities_of(store).require("documents", store)
            found = load_embedder(embedder)
            space = None if agent is None else space_of(env, agent)
        except KeepstateError as error:
            raise click.BadParameter(error.message) from None
        assert found is not None
        done, total = asyncio.run(_reindex(store, found, space))
    click.echo(f"embedded {done} document(s); {total} in all are embedded with {found.name}", err=True)


async def _reindex(url: str, embedder: Embedder, space: str | None) -> tuple[int, int]:
    """How many documents were embedded, and how many are embedded with it now."""
    from ..embedding import reindex as embed_pending
    from ..stores import open_database

    database = open_database(url)
    try:
        facet = await database.documents()
        key = await embedder.acurrent_key()
        before, total = await facet.embedding_counts(key, space)
        with _progress(total - before) as advance:
            done = await embed_pending(facet, embedder, space, progress=advance)
        return done, (await facet.embedding_counts(key, space))[0]
    finally:
        await database.aclose()
        embedder.close()


class _progress:
    """A progress bar on a terminal (standard error) over ``pending`` documents; nothing elsewhere."""

    def __init__(self, pending: int) -> None:
        console = Console(stderr=True)
        self.bar = None
        if console.is_terminal:
            self.bar = Progress(
                TextColumn("embedding"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=console,
            )
            self.task = self.bar.add_task("embedding", total=pending)

    def __enter__(self) -> Callable[[int], None]:
        if self.bar is None:
            return lambda _count: None
        self.bar.start()
        bar, task = self.bar, self.task
        return lambda count: bar.advance(task, count)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
