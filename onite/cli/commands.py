"""The whole command line: importing a command module registers its commands on onite.cli.options.app."""

from onite.cli import drivecmds, infocmds, jobcmds, recurcmds  # noqa: F401
from onite.cli.options import app

__all__ = ["app"]
