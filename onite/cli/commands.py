"""The whole command line: the command modules, each of which registers its commands in
onite.cli.options.COMMANDS when imported."""

import importlib

from onite.cli.options import COMMANDS, Command

MODULES = ("jobcmds", "infocmds", "drivecmds", "recurcmds")  # the most typed first


def top_command(name: str) -> Command | None:
    """The command ``name`` (not a group's), importing command modules only until it is registered."""
    for module in MODULES:
        if (None, name) in COMMANDS:
            break
        importlib.import_module(f"onite.cli.{module}")
    return COMMANDS.get((None, name))


def every_command() -> dict[tuple[str | None, str], Command]:
    """Every command, by (group, name)."""
    for module in MODULES:
        importlib.import_module(f"onite.cli.{module}")
    return COMMANDS
