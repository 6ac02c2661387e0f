"""``onite cron --install`` / ``--uninstall``: the cron entry that drains a spool, and the spool's record of it.

The entry is a marked block in the caller's crontab (root's, for a system
spool), read with ``crontab -l`` and written back whole with ``crontab -``:

    # BEGIN onite /var/spool/onite (onite cron --install wrote this; onite cron --uninstall removes it)
    0 20 * * * ONITE_STARTED_BY=cron /usr/local/bin/onite run --quiet --spool /var/spool/onite
    # END onite /var/spool/onite

Installing replaces that spool's block and leaves every other line as it
was, so it is idempotent. Because nobody but root may read root's crontab,
the spool keeps a world-readable record of what was installed,
SPOOL/cron.HOST.state (JSON: the schedule, the command, when and by whom it
was installed, the next drain it will start), which ``onite status`` and
``onite submit`` read (onite.drain.nextdrain; the record is onite.spool.cronrecords'). Only the spool's owner writes the
spool's top folder, so the record cannot be forged by users.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from onite.app.common import open_spool
from onite.core.schedule import validate_schedule
from onite.core.errors import InvalidInput, Refused, SpoolError
from onite.spool.cronrecords import CronRecord, record_path, write_record
from onite.spool.files import remove_file

# ---- the block (pure) --------------------------------------------------------------------


def markers(root: Path) -> tuple[str, str]:
    return (f"# BEGIN onite {root} (onite cron --install wrote this; onite cron --uninstall removes it)",
            f"# END onite {root}")


def without_block(text: str, root: Path) -> tuple[list[str], bool]:
    """The lines of crontab ``text`` without the block of spool ``root``, and whether there was one."""
    begin, end = markers(root)
    kept, inside, found = [], False, False
    for line in text.splitlines():
        if not inside and line == begin:
            inside = found = True
        elif inside and line == end:
            inside = False
        elif not inside:
            kept.append(line)
    return kept, found


def with_block(text: str, root: Path, entries: list[str]) -> str:
    """Crontab ``text`` with the block of spool ``root`` replaced by (or, if absent, appended as) ``entries``."""
    kept, _ = without_block(text, root)
    while kept and not kept[-1].strip():
        kept.pop()
    begin, end = markers(root)
    return "\n".join(kept + ([""] if kept else []) + [begin, *entries, end]) + "\n"


def stray_lines(lines: list[str], root: Path) -> list[str]:
    """Lines outside the block that start a driver of this spool (added by hand: ``onite cron | crontab -``)."""
    import shlex

    spool_arg = f"--spool {shlex.quote(str(root))}"
    return [line for line in lines if not line.lstrip().startswith("#") and " run " in line
            and (line.rstrip().endswith(spool_arg) or f"{spool_arg} " in line)]


# ---- the crontab (effects) ---------------------------------------------------------------


def read_crontab() -> str:
    """The caller's crontab (``crontab -l``); empty if they have none.

    Raises:
        SpoolError: there is no crontab command, or it failed.
    """
    import subprocess

    try:
        proc = subprocess.run(["crontab", "-l"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    except FileNotFoundError:
        raise SpoolError("there is no crontab command on this machine",
                         "install cron, or start drains another way: the systemd timer or onite daemon "
                         "(docs/admin-guide.md)") from None
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SpoolError(f"crontab -l failed: {err}", "check that cron works: crontab -l") from None
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip()
        if "no crontab" in said.lower():
            return ""
        raise SpoolError(f"crontab -l failed: {said or f'exit {proc.returncode}'}", "check that cron works: crontab -l")
    return proc.stdout.decode("utf-8", "surrogateescape")


def write_crontab(text: str) -> None:
    """Replace the caller's crontab with ``text`` (``crontab -``).

    Raises:
        SpoolError: crontab refused it.
    """
    import subprocess

    try:
        proc = subprocess.run(["crontab", "-"], input=text.encode("utf-8", "surrogateescape"), capture_output=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SpoolError(f"crontab - failed: {err}", "check that cron works: crontab -l") from None
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip().replace("\n", " ")
        raise SpoolError(f"crontab refused the new table: {said or f'exit {proc.returncode}'}",
                         "nothing was changed; check the schedule in onite.toml")


@dataclass(frozen=True)
class Installed:
    """What ``install`` or ``uninstall`` did."""

    root: Path
    entries: tuple[str, ...]  # the lines now in the block (none after uninstall)
    replaced: bool  # a block was there before
    strays: tuple[str, ...]  # lines outside the block that also start a driver of this spool
    next_drain: datetime | None = None


def _check_may(spool, what: str) -> None:
    """Raises:
        Refused: this user may not write the spool's top folder (it is root's).
    """
    if not os.access(spool.root, os.W_OK):
        raise Refused(f"the cron entry of {spool.root} is its owner's to {what}", f"ask root: sudo onite cron --{what}")


def install_entry(spool, host: str, command: str, now: datetime) -> Installed:
    """Write (or replace) this spool's block in the caller's crontab, and record it in the spool.

    Raises:
        Refused: the spool is not the caller's (root's).
        InvalidInput: the schedule is empty or not valid cron, or the spool's path cannot be written in a crontab.
        SpoolError: crontab failed. SpoolIOError: the record could not be written.
    """
    import pwd

    from onite.core.schedule import next_drain

    _check_may(spool, "install")
    schedule = tuple(spool.config.schedule)
    if not schedule:
        raise InvalidInput("schedule in onite.toml is empty: there is no time to start a drain at",
                           "set schedule (e.g. schedule = [\"0 20 * * *\"]), then run onite cron --install again")
    if any(ord(c) < 32 or c == "\x7f" or c == "%" for c in str(spool.root)):
        raise InvalidInput(f"the spool's path {str(spool.root)!r} cannot be written in a crontab "
                           "(control characters or %)", "use a spool path without them")
    entries = crontab_entries(spool.root, schedule, command)
    current = read_crontab()
    kept, replaced = without_block(current, spool.root)
    write_crontab(with_block(current, spool.root, entries))
    upcoming = next_drain(schedule, now)
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    write_record(spool.root, CronRecord(host, os.uname().nodename, schedule, command, now, user, upcoming))
    return Installed(spool.root, tuple(entries), replaced, tuple(stray_lines(kept, spool.root)), upcoming)


def uninstall_entry(spool, host: str) -> Installed:
    """Remove this spool's block from the caller's crontab, and its record from the spool.

    Raises:
        Refused: the spool is not the caller's. SpoolError: crontab failed.
    """
    _check_may(spool, "uninstall")
    current = read_crontab()
    kept, found = without_block(current, spool.root)
    if found:
        while kept and not kept[-1].strip():
            kept.pop()  # the empty line install put before the block
        write_crontab("\n".join(kept) + "\n" if kept else "")
    remove_file(record_path(spool.root, host))
    return Installed(spool.root, (), found, tuple(stray_lines(kept, spool.root)))


def cron_lines(spool: str | None) -> str:
    """``onite cron``: root crontab lines that start this onite at the times of the spool's ``schedule``.

    Raises:
        SpoolError: no spool there. InvalidInput: an expression of ``schedule`` is not valid cron.
    """
    target = open_spool(spool)
    return crontab_lines(target.root, target.config.schedule, command_prefix())


def cron_command(spool: str | None, now: datetime, *, install: bool = False, uninstall: bool = False) -> str:
    """``onite cron [--install | --uninstall]``: the lines, or install or remove them (onite.app.crontab); the text to print.

    Raises:
        InvalidInput: both options, or a bad schedule. Refused: the spool is root's and this is not root.
        SpoolError: no spool there, or crontab failed.
    """
    if install and uninstall:
        raise InvalidInput("--install and --uninstall together", "give one of them")
    if not install and not uninstall:
        return cron_lines(spool)
    from onite.drain.nextdrain import cron_daemon_running, when_text
    from onite.spool.settings import default_host

    target = open_spool(spool)
    host = default_host(target.config)
    if install:
        done = install_entry(target, host, command_prefix(), now)
        lines = [f"{'replaced' if done.replaced else 'installed'} the cron entry of {target.root} in your crontab:",
                 *(f"  {entry}" for entry in done.entries)]
        if done.next_drain is not None:
            lines.append(f"next drain {when_text(done.next_drain, now)} by cron on host {host}; "
                         "onite status and onite submit tell every user so")
        if not cron_daemon_running():
            lines.append("warning: no cron daemon runs on this machine: nothing starts these entries until one does")
    else:
        done = uninstall_entry(target, host)
        lines = [f"removed the cron entry of {target.root} from your crontab" if done.replaced
                 else f"your crontab had no cron entry of {target.root} (onite cron --install writes one)"]
    if done.strays:
        lines.append(f"note: {len(done.strays)} other line(s) of your crontab also start a driver of this spool "
                     "(remove them with crontab -e):")
        lines.extend(f"  {line}" for line in done.strays)
    return "\n".join(lines) + "\n"


def command_prefix() -> str:
    """How this onite was started, as a command a crontab can run (cron has a short PATH, hence
    absolute paths).

    Raises: nothing; an onite not found on PATH is named as it was started.
    """
    import shlex

    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "onite"
    if argv0.endswith("__main__.py") or argv0 == "-m" or argv0 == "-c":
        return f"{shlex.quote(sys.executable)} -m onite"
    import shutil

    found = shutil.which(argv0) if os.sep not in argv0 else os.path.abspath(argv0)
    return shlex.quote(found or argv0)


def crontab_entries(spool_root: object, schedule: Sequence[str], command: str) -> list[str]:
    """The crontab entries (no comments) that start ``onite run`` at each time of ``schedule``.

    Each says ``ONITE_STARTED_BY=cron``, so that the driver records who started it (onite.drain.heartbeat).

    Raises:
        InvalidInput: an expression in the schedule is not valid cron.
    """
    import shlex

    validate_schedule(tuple(schedule))
    # --quiet: cron would mail every night's log lines; onite.log keeps them, and failures notify
    return [f"{' '.join(expr.split())} ONITE_STARTED_BY=cron {command} run --quiet --spool {shlex.quote(str(spool_root))}"
            for expr in schedule]


def crontab_lines(spool_root: object, schedule: Sequence[str], command: str) -> str:
    """Root crontab lines that start ``onite run`` at each time of ``schedule``.

    Raises:
        InvalidInput: an expression in the schedule is not valid cron.
    """
    entries = crontab_entries(spool_root, schedule, command)
    lines = [
        f"# onite: drain the spool {spool_root} at the times of `schedule` in its onite.toml",
        "# install them with: onite cron --install (it keeps root's other entries, and tells users a drain is scheduled)",
    ]
    return "\n".join(lines + entries) + "\n"
