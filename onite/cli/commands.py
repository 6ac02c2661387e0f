"""The whole command line: importing the command modules registers each command in onite.cli.options.COMMANDS."""

from onite.cli import drivecmds, infocmds, jobcmds, recurcmds  # noqa: F401
from onite.cli.options import COMMANDS, GROUPS

__all__ = ["COMMANDS", "GROUPS"]
