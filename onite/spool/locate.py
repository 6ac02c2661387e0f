"""Which spool a command uses: --spool, else ONITE_SPOOL, else the system spool (/var/spool/onite unless
/etc/onite.toml says ``spool = "/srv/onite"``), else, where root has set up none, a personal one
($XDG_STATE_HOME/onite; docs/admin-guide.md). Nothing here writes.
"""

from __future__ import annotations

import os
import stat
from enum import StrEnum
from pathlib import Path

from onite.core.errors import ConfigError, InvalidInput, OniteError, Refused
from onite.core.record import Record
from onite.spool.paths import SpoolDir

SYSTEM_SPOOL = Path("/var/spool/onite")
SYSTEM_CONFIG = "/etc/onite.toml"  # the admin's one place for every user's default; ONITE_SYSTEM_CONFIG overrides
SYSTEM_KEYS = ("spool",)


class Source(StrEnum):
    """Where a command's spool came from."""

    OPTION = "--spool"  #: given with --spool
    ENVIRONMENT = "ONITE_SPOOL"  #: from $ONITE_SPOOL
    SYSTEM = "system"  #: the system spool (/etc/onite.toml's spool, else /var/spool/onite)
    PERSONAL = "personal"  #: a user's own, where there is no system spool ($XDG_STATE_HOME/onite)


class Location(Record):
    """Which spool a command uses and why (for errors, status and --help)."""

    path: Path
    source: Source
    reason: str = ""  # why this one: "default: it exists", "given with --spool", …

    def describe(self) -> str:
        """``system spool /var/spool/onite (default: it exists)``."""
        kind = {Source.SYSTEM: "system spool ", Source.PERSONAL: "personal spool "}.get(self.source, "")
        return f"{kind}{self.path} ({self.reason or self.source})"


def system_spool(environ) -> tuple[Path, str]:
    """The system spool's path, and where that came from: ``spool`` in /etc/onite.toml, else the default. The
    file chooses root's spool too, so must be root's (or the caller's) and writable by nobody else.
    Raises ConfigError: it cannot be read, is not so, is not TOML, or says something else."""
    path = Path(environ.get("ONITE_SYSTEM_CONFIG") or SYSTEM_CONFIG)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"{path} is not a regular file", "make it one, or remove it")
            if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
                raise ConfigError(f"{path} must be root's and writable by root only (it chooses every user's spool)",
                                  f"chown root {path} && chmod 644 {path}")
            data = os.read(fd, 65536)
        finally:
            os.close(fd)
    except (FileNotFoundError, NotADirectoryError):
        return SYSTEM_SPOOL, "default"
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read: {err.strerror}", "make it readable by everyone (chmod 644)") from None
    import tomllib

    try:
        settings = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: not valid TOML ({err})", "fix the file (docs/admin-guide.md)") from None
    unknown = sorted(set(settings) - set(SYSTEM_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r}", f"the keys are: {', '.join(SYSTEM_KEYS)}")
    spool = settings.get("spool")
    if spool is None:
        return SYSTEM_SPOOL, "default"
    if not isinstance(spool, str) or not spool.startswith("/") or "\0" in spool:
        raise ConfigError(f"{path}: spool must be an absolute path, not {spool!r}", 'e.g. spool = "/srv/onite"')
    return Path(os.path.normpath(spool)), f"set in {path}"


def is_initialised_system_spool(path: Path) -> bool:
    """Has root initialised a spool at ``path`` (root's, with a jobs/ folder)?"""
    try:
        return os.stat(path).st_uid == 0 and stat.S_ISDIR(os.stat(SpoolDir(path).jobs_dir).st_mode)
    except OSError:
        return False


def _absolute(path: str, given: str) -> Path:
    """``path`` made absolute. Raises InvalidInput: it is relative and the current directory is gone."""
    try:
        return Path(path).absolute()
    except FileNotFoundError:
        raise InvalidInput(f"{given} {path!r} is a relative path, and your current directory no longer exists",
                           "cd to a folder that exists, or give the spool's full path") from None


def locate(explicit: str | None, environ: "os._Environ[str] | dict[str, str]", euid: int) -> Location:
    """--spool, ONITE_SPOOL, the system spool for root and, once root has initialised it, for everyone, else a
    personal spool. Raises ConfigError: /etc/onite.toml is bad (system_spool)."""
    if explicit is not None:
        if not explicit:
            raise InvalidInput("--spool is empty", "give the spool's folder, or leave --spool out for the default")
        return Location(_absolute(explicit, "--spool"), Source.OPTION, "given with --spool")
    if environ.get("ONITE_SPOOL"):
        return Location(_absolute(environ["ONITE_SPOOL"], "$ONITE_SPOOL"), Source.ENVIRONMENT, "from $ONITE_SPOOL")
    system, origin = system_spool(environ)
    where = "" if origin == "default" else f"; {origin}"
    if euid == 0:
        return Location(system, Source.SYSTEM, f"root's default{where}")
    if is_initialised_system_spool(system):
        return Location(system, Source.SYSTEM, f"default: it exists{where}")
    state_home = environ.get("XDG_STATE_HOME") or ""
    if not state_home.startswith("/"):  # the XDG spec says relative values are ignored
        home = environ.get("HOME") or ""
        if not home.startswith("/"):  # a relative one would follow the current directory: the account's home
            import pwd

            try:
                home = pwd.getpwuid(euid).pw_dir
            except KeyError:
                home = ""
        if not home.startswith("/"):
            raise InvalidInput(f"HOME={environ.get('HOME', '')!r} is not an absolute path, and your account has no "
                               "home folder to find your spool in", "set HOME to your home folder, or give --spool DIR")
        state_home = os.path.join(home, ".local", "state")
    return Location(Path(state_home) / "onite", Source.PERSONAL, f"default: there is no system spool at {system}")


def check_may_init(where: Location, euid: int) -> None:
    """Raises Refused: a user asked to initialise the system spool, which is root's."""
    if euid == 0:
        return
    try:
        system, _ = system_spool(os.environ)
    except OniteError:
        system = SYSTEM_SPOOL
    system_path = where.source == Source.SYSTEM or where.path == system
    if is_initialised_system_spool(where.path):  # elsewhere too: a shared spool ($ONITE_SPOOL, --spool)
        raise Refused(f"the {'system ' if system_path else ''}spool {where.path} is root's: root set it up, and only "
                      "root runs onite init on it",
                      "it is ready: onite submit NAME < job.sh (for a spool of your own: onite init --spool DIR)")
    if system_path:
        raise Refused(f"the system spool {where.path} is root's to create", "ask root to run: sudo onite init")
