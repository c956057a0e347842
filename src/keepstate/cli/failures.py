"""How a command fails: one line on standard error and a non-zero exit, never a traceback.

The spec's rule for the command line ("every command that cannot open its store, or is given a
bad flag, says so in one line on stderr and exits non-zero") is kept here once: errors a user can
act on (a store that cannot be opened, a bad URL, a full disk, Ctrl-C) become one ``Error: ...``
line, with any password in a store URL hidden. Any other exception while a command works on its
store is a bug (a driver error the storage layer did not translate): it is one line too, naming
its type, as the server answers such a bug with a 500 rather than a stack.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, NoReturn

import click
import orjson

from ..errors import KeepstateError
from ..stores.base import redact

__all__ = ["INTERRUPTED", "fail", "one_line", "quiet_libraries", "redact", "show", "store_errors"]

INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C, as shells report it (128 + SIGINT)."""


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (drivers' messages hold newlines and tabs) as one space."""
    return " ".join(text.split())


class OneLineError(click.ClickException):
    """A ``ClickException`` whose message is always shown on a single line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class Interrupted(OneLineError):
    exit_code = INTERRUPTED


def fail(message: str, interrupted: bool = False) -> NoReturn:
    """Stop the command: ``Error: message`` on stderr, exit status 1 (130 when ``interrupted``)."""
    raise (Interrupted if interrupted else OneLineError)(message)


def show(error: click.ClickException, file: IO[str] | None = None) -> None:
    """Print a click error in one line; a usage error names the command's ``--help``."""
    message = one_line(error.format_message())
    if isinstance(error, click.UsageError) and error.ctx is not None:
        message = f"{message} (see '{error.ctx.command_path} --help')"
    click.echo(f"Error: {message}", file=file or sys.stderr)


def describe(error: BaseException) -> str:
    """What a user is told about an error: a keepstate error's message, else the exception's text."""
    if isinstance(error, KeepstateError):
        return error.message
    return str(error) or type(error).__name__


@contextmanager
def store_errors(url: str, verb: str, as_json: bool = False) -> Iterator[None]:
    """Errors while the command works on the store at ``url`` become one line:
    ``cannot {verb} {url}: {why}``. Ctrl-C says the command did not finish (exit status 130).

    With ``as_json`` a keepstate error is printed in its wire form instead (``keepstate state``)."""
    try:
        yield
    except KeepstateError as error:
        if as_json:
            click.echo(orjson.dumps(error.to_dict()).decode(), err=True)
            sys.exit(1)
        fail(f"cannot {verb} {redact(url)}: {describe(error)}")
    except (ValueError, OSError, ImportError) as error:
        fail(f"cannot {verb} {redact(url)}: {describe(error)}")
    except KeyboardInterrupt:
        fail(f"interrupted: the command on {redact(url)} did not finish", interrupted=True)
    except click.ClickException:
        raise
    except Exception as error:  # a driver's error the storage layer let through: a bug, but never a traceback
        fail(f"cannot {verb} {redact(url)}: {type(error).__name__}: {error} (unexpected: please report it)")


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Inside, drivers' log records (a pool's reconnection attempts, which Python's last-resort
    handler would print) are dropped: a command that opens a store reports the outcome in its own
    line. Where logging is configured (a worker, a running server) nothing changes."""
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    silence = logging.NullHandler()
    root.addHandler(silence)
    try:
        yield
    finally:
        root.removeHandler(silence)
