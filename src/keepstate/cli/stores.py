"""What a command checks about its ``--store`` URL before it opens anything.

A bad URL, a SQLite path that can never be a store file (a directory, a missing directory), and
— for a command that only reads — a SQLite store that does not exist yet are refused here, so
that nothing is created on the way to the error: opening a SQLite URL creates its file, and a
read of a mistyped path would otherwise leave a new empty store behind.

Only SQLite is checked for existence: its store is a file the URL names. A PostgreSQL or Redis
store is reachable or not, which the open itself reports.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from ..errors import NotFound, Unavailable
from ..stores import scheme_of

if TYPE_CHECKING:
    from ..platform import Platform

T = TypeVar("T")


READS_ONLY = "this command only reads, so it does not create a store"
NEVER_CREATES = "this command never creates a store"


def check_store(url: str, must_exist: bool = False, why: str = READS_ONLY) -> str:
    """The scheme of ``url`` once it passed the checks above.

    Raises ValueError for a URL keepstate does not know, ``Unavailable`` for a SQLite path that
    cannot be a store, and with ``must_exist`` ``NotFound`` for a SQLite store not there (``why``
    says why the command refuses to make one)."""
    scheme = scheme_of(url)
    if scheme == "sqlite":
        _check_sqlite(url, must_exist, why)
    return scheme


def check_store_option(url: str, must_exist: bool = False, why: str = READS_ONLY) -> str:
    """``check_store`` for a command's ``--store``: an unknown URL is a usage error (exit status 2)."""
    try:
        return check_store(url, must_exist, why)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--store") from None


def _check_sqlite(url: str, must_exist: bool, why: str) -> None:
    from ..stores.sqlite.db import require_store, sqlite_path

    path = sqlite_path(url)
    if os.path.isdir(path):
        example = os.path.join(path, "keepstate.db")
        raise Unavailable(f"{path} is a directory: a SQLite store is a file, such as {example}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise Unavailable(f"there is no directory {folder} for the SQLite file {path}")
    if must_exist:
        try:
            require_store(path)
        except NotFound as missing:
            raise NotFound(f"{missing.message} ({why})") from None


async def on_platform(store: str, action: Callable[[Platform], Awaitable[T]]) -> T:
    """``action`` on the platform of the store at ``store``, opened for it and closed after."""
    from ..platform import open_platform

    platform = await open_platform(store)
    try:
        return await action(platform)
    finally:
        await platform.aclose()
