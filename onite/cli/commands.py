"""The whole command line: importing a command module registers its commands on onite.cli.options.app."""

import copy

import typer

from onite.cli import drivecmds, infocmds, jobcmds, recurcmds  # noqa: F401
from onite.cli.options import app

__all__ = ["app", "command_for"]


def command_for(args: list[str], *, everything: bool = False):
    """The click command that runs ``args``: the group with only the command ``args`` name, for building every
    command's parameters costs more than running most of them; every command for help, completion (``everything``),
    and a name that is no command's (click's error then suggests one)."""
    name = _command_name(args)
    named = lambda info: info.name or typer.main.get_command_name(info.callback.__name__)  # noqa: E731
    commands = [info for info in app.registered_commands if named(info) == name]
    groups = [info for info in app.registered_groups if info.name == name]
    if everything or not (commands or groups):
        return typer.main.get_command(app)
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = commands, groups
    return typer.main.get_command(one)


def _command_name(args: list[str]) -> str | None:
    """The first word of ``args`` that is neither an option of onite's own nor --spool's value."""
    words = iter(args)
    for word in words:
        if word == "--spool":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None
