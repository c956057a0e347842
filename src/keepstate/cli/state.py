"""``keepstate state get/put/delete/ls``: read and write state as an admin, straight on a store.

For debugging: no server, no key, no run token — the store URL is the credential. Each command
addresses one scope the way a server does (environment, kind, agent, id) and prints JSON on
stdout; an error prints its wire form (``{"error": code, ...}``) on stderr and exits 1.
``get``, ``ls`` and ``delete`` need the store to exist; only ``put`` creates one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import click
import orjson

from .. import values
from ..errors import NotFound
from ..scope import Scope, scope_namespace
from ..stores.records import SCOPE_KINDS
from .failures import quiet_libraries, store_errors
from .numbers import whole
from .stores import check_store_option

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_STORE = "sqlite:///keepstate.db"


def _scope_options(fn: F) -> F:
    """The options every state command takes to name its scope."""
    options = [
        click.option(
            "--store",
            envvar="KEEPSTATE_STORE",
            default=DEFAULT_STORE,
            show_default=True,
            help="Store URL (env KEEPSTATE_STORE).",
        ),
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


def _json_errors(store: str) -> AbstractContextManager[None]:
    """Every keepstate error printed in its wire form, exit status 1; other failures one line."""
    return store_errors(store, "use", as_json=True)


@contextmanager
def _opened(where: dict[str, Any], reads: bool, key: str | None = None) -> Iterator[Scope]:
    """The scope named by the scope options, once every input was checked: nothing is opened (and
    no store created) for a bad scope or key. A command that ``reads`` (get, ls, delete) refuses a
    SQLite store that does not exist."""
    from ..embedded import open as open_store

    store, kind, agent, id_, env = (where[name] for name in ("store", "kind", "agent", "id_", "env"))
    if kind != "agent" and id_ is None:
        raise click.UsageError(f"--id is required for --scope {kind} (the run id, session id or end user)")
    with quiet_libraries(), _json_errors(store):
        scope_namespace(kind, agent, id_, env)
        if key is not None:
            values.check_key(key)
        check_store_option(store, must_exist=reads)
        with open_store(store) as opened:
            yield opened.scope(kind, agent=agent, id=id_, env=env)


@click.group()
def state() -> None:
    """Read and write agent state straight on a store, for debugging (admin)."""


@state.command()
@_scope_options
@click.argument("key")
def get(key: str, **where: Any) -> None:
    """Print {"key", "value", "version"}; a missing key is a not_found error."""
    with _opened(where, reads=True, key=key) as scope:
        value, version = scope.get_versioned(key)
        if version == 0:
            raise NotFound(f"no key {key!r} in this scope")
        _echo({"key": key, "value": value, "version": version})


@state.command()
@_scope_options
@click.option("--if-version", type=whole(0), default=None, help="Write only if the key is at this version (0: absent).")
@click.argument("key")
@click.argument("value", required=False)
def put(key: str, value: str | None, if_version: int | None, **where: Any) -> None:
    """Write VALUE (JSON; read from stdin when left out) and print {"key", "version"}."""
    with _json_errors(where["store"]):
        parsed = values.parse(sys.stdin.read() if value is None else value)
    with _opened(where, reads=False, key=key) as scope:
        _echo({"key": key, "version": scope.put(key, parsed, if_version=if_version)})


@state.command()
@_scope_options
@click.option("--if-version", type=whole(0), default=None, help="Delete only if the key is at this version.")
@click.argument("key")
def delete(key: str, if_version: int | None, **where: Any) -> None:
    """Delete KEY (also when absent) and print {"key", "deleted": true}."""
    with _opened(where, reads=True, key=key) as scope:
        scope.delete(key, if_version=if_version)
        _echo({"key": key, "deleted": True})


@state.command(name="ls")
@_scope_options
@click.option("--prefix", default="", help="Only keys starting with this.")
def ls(prefix: str, **where: Any) -> None:
    """Print {"keys": [{"key", "version"}, ...]} in key order."""
    with _opened(where, reads=True) as scope:
        _echo({"keys": [{"key": key, "version": version} for key, version in scope.keys(prefix)]})
