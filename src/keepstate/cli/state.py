"""``keepstate state get/put/delete/ls``: read and write state as an admin, straight on a store.

For debugging: no server, no key, no run token — the store URL is the credential. Each command
addresses one scope the way a server does (environment, kind, agent, id) and prints JSON on
stdout; an error prints its wire form (``{"error": code, ...}``) on stderr and exits 1.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
import orjson

from ..errors import KeepstateError, NotFound
from ..scope import Scope
from ..stores.records import SCOPE_KINDS

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_STORE = "sqlite:///keepstate.db"


def _scope_options(fn: F) -> F:
    """The options every state command takes to name its scope."""
    options = [
        click.option("--store", envvar="KEEPSTATE_STORE", default=DEFAULT_STORE, show_default=True,
                     help="Store URL (env KEEPSTATE_STORE)."),
        click.option("--env", "env", default="default", show_default=True, help="Environment."),
        click.option("--scope", "kind", type=click.Choice(SCOPE_KINDS), default="session", show_default=True),
        click.option("--agent", required=True, help="The agent whose state it is."),
        click.option("--id", "id_", default=None, help="Run id, session id or end user (not for --scope agent)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _echo(data: Any) -> None:
    click.echo(orjson.dumps(data).decode())


@contextmanager
def _opened(store: str, env: str, kind: str, agent: str, id_: str | None) -> Iterator[Scope]:
    """The scope, with every keepstate error printed as JSON and exit status 1."""
    from ..embedded import open as open_store

    if kind != "agent" and id_ is None:
        raise click.UsageError(f"--id is required for --scope {kind} (the run id, session id or end user)")
    try:
        with open_store(store) as opened:
            yield opened.scope(kind, agent=agent, id=id_, env=env)
    except KeepstateError as error:
        click.echo(orjson.dumps(error.to_dict()).decode(), err=True)
        sys.exit(1)
    except ValueError as error:  # an unknown store URL
        raise click.ClickException(str(error)) from None


def _scoped(fn: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(store: str, env: str, kind: str, agent: str, id_: str | None, **rest: Any) -> None:
        with _opened(store, env, kind, agent, id_) as scope:
            fn(scope, **rest)
    return wrapper


@click.group()
def state() -> None:
    """Read and write agent state straight on a store, for debugging (admin)."""


@state.command()
@_scope_options
@click.argument("key")
@_scoped
def get(scope: Scope, key: str) -> None:
    """Print {"key", "value", "version"}; a missing key is a not_found error."""
    value, version = scope.get_versioned(key)
    if version == 0:
        raise NotFound(f"no key {key!r} in this scope")
    _echo({"key": key, "value": value, "version": version})


@state.command()
@_scope_options
@click.option("--if-version", type=int, default=None, help="Write only if the key is at this version (0: absent).")
@click.argument("key")
@click.argument("value", required=False)
@_scoped
def put(scope: Scope, key: str, value: str | None, if_version: int | None) -> None:
    """Write VALUE (JSON; read from stdin when left out) and print {"key", "version"}."""
    from .. import values

    parsed = values.parse(sys.stdin.read() if value is None else value)
    _echo({"key": key, "version": scope.put(key, parsed, if_version=if_version)})


@state.command()
@_scope_options
@click.option("--if-version", type=int, default=None, help="Delete only if the key is at this version.")
@click.argument("key")
@_scoped
def delete(scope: Scope, key: str, if_version: int | None) -> None:
    """Delete KEY (also when absent) and print {"key", "deleted": true}."""
    scope.delete(key, if_version=if_version)
    _echo({"key": key, "deleted": True})


@state.command(name="ls")
@_scope_options
@click.option("--prefix", default="", help="Only keys starting with this.")
@_scoped
def ls(scope: Scope, prefix: str) -> None:
    """Print {"keys": [{"key", "version"}, ...]} in key order."""
    _echo({"keys": [{"key": key, "version": version} for key, version in scope.keys(prefix)]})
