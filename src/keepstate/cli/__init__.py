"""The ``keepstate`` command. Each subcommand lives in its own module of this package.

Errors are shown the way the spec asks, in one line on standard error (``failures.show``):
click's own usage errors would print the usage and a hint on three more lines.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from .failures import show

# module name -> attribute holding the click command (or group)
_COMMANDS = {
    "serve": "keepstate.cli.serve:serve",
    "worker": "keepstate.cli.worker:worker",
    "keys": "keepstate.cli.keys:keys",
    "state": "keepstate.cli.state:state",
    "export": "keepstate.cli.transfer:export",
    "import": "keepstate.cli.transfer:import_",
    "migrate": "keepstate.cli.migrate:migrate",
    "purge": "keepstate.cli.purge:purge",
    "backup": "keepstate.cli.backup:backup",
    "memory": "keepstate.cli.memory:memory",
}


class _LazyGroup(click.Group):
    """Imports a subcommand's module only when it is used, so ``--help`` stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in _COMMANDS if self.get_command(ctx, name) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name == module_name:
                return None
            raise
        command: click.Command = getattr(module, attribute)
        return command

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command; as a program (``standalone_mode``), every click error is one line."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            status = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as error:
            error.show()  # ``keepstate`` alone: the help is the answer
            sys.exit(error.exit_code)
        except click.ClickException as error:
            show(error)
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("Error: aborted", err=True)
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="keepstate")
def main() -> None:
    """keepstate: durable state, sessions and exclusive turns for AI agents."""
