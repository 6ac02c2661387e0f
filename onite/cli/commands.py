"""onite's command line: the typer application with every command registered (``app``).

Importing a command module registers its commands on onite.cli.options.app;
this module imports them all, so that ``from onite.cli.commands import app``
is the whole command line (onite.__main__).
"""

from __future__ import annotations

from onite.cli import drivecmds, infocmds, jobcmds, recurcmds
from onite.cli.options import app

COMMANDS = (jobcmds, drivecmds, recurcmds, infocmds)  # imported for what they register on ``app``

__all__ = ["app"]
