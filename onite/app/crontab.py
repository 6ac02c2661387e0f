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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from onite.core.errors import InvalidInput, Refused, SpoolError
from onite.spool.cronrecords import CronRecord, record_path, write_record

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
    """Lines outside the block that start a driver of this spool (``onite cron | crontab -`` of old)."""
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


def install(spool, host: str, command: str, now: datetime) -> Installed:
    """Write (or replace) this spool's block in the caller's crontab, and record it in the spool.

    Raises:
        Refused: the spool is not the caller's (root's).
        InvalidInput: the schedule is empty or not valid cron, or the spool's path cannot be written in a crontab.
        SpoolError: crontab failed. SpoolIOError: the record could not be written.
    """
    import pwd

    from onite.core.schedule import crontab_entries, next_drain

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


def uninstall(spool, host: str) -> Installed:
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
    try:
        os.unlink(record_path(spool.root, host))
    except FileNotFoundError:
        pass
    except OSError as err:
        from onite.core.errors import SpoolIOError

        raise SpoolIOError(record_path(spool.root, host), "removing", err) from None
    return Installed(spool.root, (), found, tuple(stray_lines(kept, spool.root)))
