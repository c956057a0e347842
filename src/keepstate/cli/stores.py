"""What a command checks about its ``--store`` URL before it opens anything, and opening its platform.

A bad URL, a SQLite path that can never be a store file (a directory, a missing directory), and
— for a command that only reads — a SQLite store that does not exist yet are refused here, so
that nothing is created on the way to the error: opening a SQLite URL creates its file, and a
read of a mistyped path would otherwise leave a new empty store behind.

Each backend says what it can check without creating anything (``stores.preflight``): the
SQLite file and its tables, the PostgreSQL schema's keepstate tables.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from ..errors import NotFound
from ..stores import preflight

if TYPE_CHECKING:
    from ..platform import Platform

T = TypeVar("T")
READS_ONLY = "this command only reads, so it does not create a store"
NEVER_CREATES = "this command never creates a store"


def check_store(url: str, must_exist: bool = False, why: str = READS_ONLY) -> None:
    """``stores.preflight`` of ``url``: ValueError for a URL keepstate does not know, ``Unavailable``
    for one that can never be a store, and with ``must_exist`` ``NotFound`` for a store not there
    (``why`` says why the command refuses to make one)."""
    try:
        preflight(url, must_exist)
    except NotFound as missing:
        if not must_exist:
            raise
        raise NotFound(f"{missing.message} ({why})") from None


def check_store_option(url: str, must_exist: bool = False, why: str = READS_ONLY) -> None:
    """``check_store`` for a command's ``--store``: an unknown URL is a usage error (exit status 2)."""
    try:
        check_store(url, must_exist, why)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--store") from None


async def on_platform(store: str, action: Callable[[Platform], Awaitable[T]]) -> T:
    """``action`` on the platform of the store at ``store``, opened for it and closed after."""
    from ..platform import open_platform

    platform = await open_platform(store)
    try:
        return await action(platform)
    finally:
        await platform.aclose()
