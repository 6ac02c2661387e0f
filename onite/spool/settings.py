"""A spool's settings: the one read of onite.toml, and the one place that asks the machine its name and its
time zone."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from onite.core.config import Config, parse_config
from onite.core.errors import ConfigError
from onite.core.policy import CutoffState, cutoff_state
from onite.spool.accounts import user_name


def load_config(path: Path, skipped: list[ConfigError] | None = None) -> Config:
    """Read ``path`` (none: the defaults). Given ``skipped``, faults go there and their defaults are used instead;
    else raises ConfigError, the first fault."""
    faults: list[ConfigError] = []
    try:
        # a byte order mark, as some editors write one, is no TOML: it is not the admin's to see
        config = parse_config(path.read_text(encoding="utf-8").removeprefix("\ufeff"), str(path), faults)
    except FileNotFoundError:
        return Config()
    except UnicodeDecodeError as err:
        line = err.object.count(b"\n", 0, err.start) + 1
        faults.append(ConfigError(f"{path} is not UTF-8 text (byte {err.object[err.start]:#04x} on line {line})",
                                  "write it in UTF-8 (iconv -f latin1 -t utf-8 converts a Latin-1 file)"))
        config = Config()
    except OSError as err:
        faults.append(ConfigError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}",
                                  "check its permissions"))
        config = Config()
    if not faults:
        return config
    try:
        owner = os.stat(path).st_uid
    except OSError:
        owner = os.geteuid()
    if owner != os.geteuid():  # a user cannot fix the admin's file: the hints say whom to ask
        for err in faults:
            err.hint = f"ask {user_name(owner)}, who owns {path.name} ({err.hint})"
    if skipped is None:
        raise faults[0]
    skipped.extend(faults)
    return config


def default_host(config: Config) -> str:
    """This machine's identity as a driver: ``host`` in onite.toml, else the short hostname."""
    return config.host or os.uname().nodename.split(".")[0]


def spooling(config: Config, now: datetime) -> CutoffState:
    """Whether spooling is closed at ``now`` by ``cutoff``, read on the machine's clock (/etc/localtime): a caller's
    TZ moves their own times of day, never the spool's cutoff."""
    if config.cutoff is None:
        return CutoffState(False)
    zone = machine_zone()
    return cutoff_state(now.astimezone(zone), config.cutoff, config.until, zone)


def machine_zone():
    """The zone of /etc/localtime, else UTC (the C library's choice without one). A file cut short is UTC too:
    zoneinfo may loop for ever on a footer without its last newline (CPython issue 143241)."""
    import io
    from datetime import timezone
    from zoneinfo import ZoneInfo

    try:
        with open("/etc/localtime", "rb") as zone_file:  # root's, and a link into /usr/share/zoneinfo
            data = zone_file.read(1 << 20)
        if data[4:5] in (b"2", b"3") and not data.endswith(b"\n"):
            return timezone.utc
        return ZoneInfo.from_file(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - a damaged zone file must not stop a command
        return timezone.utc
