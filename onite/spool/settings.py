"""A spool's settings: the one read of onite.toml, and the one place that asks the machine its name."""

from __future__ import annotations

import os
from pathlib import Path

from onite.core.config import Config, parse_config
from onite.core.errors import ConfigError


def load_config(path: Path) -> Config:
    """Read ``path``; a spool without onite.toml uses the defaults. Raises ConfigError: unreadable or invalid."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}", "check its permissions") from None
    try:
        return parse_config(text, str(path))
    except ConfigError as err:
        try:
            owner = os.stat(path).st_uid
        except OSError:
            owner = os.geteuid()
        if owner != os.geteuid():  # a user cannot fix the admin's file: tell them whom to ask
            import pwd

            try:
                name = pwd.getpwuid(owner).pw_name
            except KeyError:
                name = str(owner)
            err.hint = f"ask {name}, who owns {path.name} ({err.hint})"
        raise


def default_host(config: Config) -> str:
    """This machine's identity as a driver: ``host`` in onite.toml, else the short hostname."""
    return config.host or os.uname().nodename.split(".")[0]
