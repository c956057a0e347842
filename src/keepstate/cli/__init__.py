"""The ``keepstate`` command. Each subcommand lives in its own module of this package."""

from __future__ import annotations

import importlib

import click

# module name -> attribute holding the click command (or group)
_COMMANDS = {
    "serve": "keepstate.cli.serve:serve",
    "worker": "keepstate.cli.worker:worker",
    "keys": "keepstate.cli.keys:keys",
    "state": "keepstate.cli.state:state",
    "export": "keepstate.cli.transfer:export",
    "import": "keepstate.cli.transfer:import_",
    "migrate": "keepstate.cli.migrate:migrate",
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


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="keepstate")
def main() -> None:
    """keepstate: durable state, sessions and exclusive turns for AI agents."""
