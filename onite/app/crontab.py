"""``onite cron [--install | --uninstall]``: the cron entry that drains a spool, and the spool's record of it.

The entry is a marked block in the caller's crontab, replaced whole, every other line kept. Only root may read
root's crontab, so the spool keeps a world-readable record of what was installed, for status and submit."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path, PurePosixPath

from onite.app.common import me, open_spool
from onite.core.schedule import next_drain
from onite.core.errors import InvalidInput, Refused, SpoolError
from onite.spool.cronrecords import CronRecord, record_path, write_record
from onite.spool.files import remove_file
from onite.spool.settings import default_host
from onite.drain.nextdrain import cron_daemon_running, when_text


def markers(root: Path) -> tuple[str, str]:
    return (f"# BEGIN onite {root} (onite cron --install wrote this; onite cron --uninstall removes it)",
            f"# END onite {root}")


def without_block(text: str, root: Path) -> tuple[list[str], bool]:
    """The lines of crontab ``text`` without spool ``root``'s block (nor empty lines at the end); was it there?"""
    begin, end = markers(root)
    kept, inside, found = [], False, False
    for line in text.splitlines():
        if not inside and line == begin:
            inside = found = True
        elif inside and line == end:
            inside = False
        elif not inside:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return kept, found


def stray_lines(lines: list[str], root: Path) -> list[str]:
    """Lines outside the block that start a driver of this spool (added by hand: ``onite cron | crontab -``)."""
    spool_arg = f"--spool {shlex.quote(str(root))}"
    return [line for line in lines if not line.lstrip().startswith("#") and " run " in line
            and (line.rstrip().endswith(spool_arg) or f"{spool_arg} " in line)]


def _crontab(text: str | None = None) -> str:
    """The caller's crontab (``crontab -l``; "" if none); or, given ``text``, make it that (``crontab -``)."""
    argv = ["crontab", "-l" if text is None else "-"]
    feed = {"stdin": subprocess.DEVNULL} if text is None else {"input": text.encode("utf-8", "surrogateescape")}
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=60, **feed)
    except FileNotFoundError:
        raise SpoolError("there is no crontab command on this machine",
                         "install cron, or start drains another way: the systemd timer or onite daemon "
                         "(docs/admin-guide.md)") from None
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SpoolError(f"{' '.join(argv)} failed: {err}", "check that cron works: crontab -l") from None
    if proc.returncode == 0:
        return proc.stdout.decode("utf-8", "surrogateescape")
    said = proc.stderr.decode("utf-8", "replace").strip() or f"exit {proc.returncode}"
    if text is not None:
        said = said.replace("\n", " ")
        raise SpoolError(f"crontab refused the new table: {said}",
                         "nothing was changed; check the schedule in onite.toml")
    if "no crontab" in said.lower():
        return ""
    raise SpoolError(f"crontab -l failed: {said}", "check that cron works: crontab -l")


def cron_lines(spool: str | None) -> str:
    """``onite cron``: root crontab lines that start this onite at the times of the spool's ``schedule``."""
    target = open_spool(spool)
    _check_writable(target.root)
    entries = crontab_entries(target.root, target.config.schedule, command_prefix())
    return "\n".join([
        f"# onite: drain the spool {target.root} at the times of `schedule` in its onite.toml",
        "# install them with: onite cron --install (it keeps root's other entries, and tells users a drain is scheduled)",
        *entries]) + "\n"


def cron_command(spool: str | None, now: datetime, *, install: bool = False, uninstall: bool = False,
                 force: bool = False) -> str:
    """``onite cron [--install [--force] | --uninstall]``: the text to print. Refused: the spool is not the
    caller's; the onite it would write is not installed for the machine, unless ``force``."""
    if install and uninstall:
        raise InvalidInput("--install and --uninstall together", "give one of them")
    if not install and not uninstall:
        return cron_lines(spool)
    target = open_spool(spool)
    root, host = target.root, default_host(target.config)
    what = "install" if install else "uninstall"
    if not os.access(root, os.W_OK):
        raise Refused(f"the cron entry of {root} is its owner's to {what}", f"ask root: sudo onite cron --{what}")
    problem = install_problem(command_prefix()) if install and not force else None
    if problem:
        raise Refused(f"{problem}, and a crontab entry must not depend on it", SYSTEM_INSTALL)
    lines, kept = _install(target, host, now) if install else _uninstall(target, host)
    strays = stray_lines(kept, root)
    if strays:
        lines.append(f"note: {len(strays)} other line(s) of your crontab also start a driver of this spool "
                     "(remove them with crontab -e):")
        lines.extend(f"  {line}" for line in strays)
    return "\n".join(lines) + "\n"


def _install(spool, host: str, now: datetime) -> tuple[list[str], list[str]]:
    """Write (or replace) the spool's block in the caller's crontab, and record it; what to say, the other lines."""
    schedule, root = tuple(spool.config.schedule), spool.root
    if not schedule:
        raise InvalidInput("schedule in onite.toml is empty: there is no time to start a drain at",
                           "set schedule (e.g. schedule = [\"0 20 * * *\"]), then run onite cron --install again")
    _check_writable(root)
    command = command_prefix()
    entries = crontab_entries(root, schedule, command)
    kept, replaced = without_block(_crontab(), root)
    begin, end = markers(root)
    _crontab("\n".join(kept + ([""] if kept else []) + [begin, *entries, end]) + "\n")
    upcoming = next_drain(schedule, now)
    write_record(spool, CronRecord(host, os.uname().nodename, schedule, command, now, me(), upcoming))
    lines = [f"{'replaced' if replaced else 'installed'} the cron entry of {root} in your crontab:",
             *(f"  {entry}" for entry in entries)]
    if not cron_daemon_running():  # then status and submit tell users that nothing is scheduled: so does this
        lines.append("warning: no cron daemon runs on this machine: these entries start nothing, and users are "
                     "told no drain is scheduled, until one runs — start it (e.g. service cron start)")
    elif upcoming is not None:
        lines.append(f"next drain {when_text(upcoming, now)} by cron on host {host}; "
                     "onite status and onite submit tell every user so")
    return lines, kept


def _check_writable(root: Path) -> None:
    """InvalidInput if the spool's path, or this onite's, cannot stand in a crontab line (a newline or a %)."""
    onite = command_prefix()  # shell-quoted already
    for what, path, shown, hint in (
            ("the spool's path", str(root), repr(str(root)), "use a spool path without them"),
            ("the path of this onite", onite, onite, "install onite where its path has none (docs/admin-guide.md)")):
        if any(ord(c) < 32 or c == "\x7f" or c == "%" for c in path):
            raise InvalidInput(f"{what} {shown} cannot be written in a crontab (control characters or %)", hint)


def _uninstall(spool, host: str) -> tuple[list[str], list[str]]:
    """Remove the spool's block from the caller's crontab, and its record; what to say, the other lines."""
    kept, found = without_block(_crontab(), spool.root)
    if found:
        _crontab("\n".join(kept) + "\n" if kept else "")
    remove_file(record_path(spool, host))
    return [f"removed the cron entry of {spool.root} from your crontab" if found
            else f"your crontab had no cron entry of {spool.root} (onite cron --install writes one)"], kept


SYSTEM_INSTALL = ("install onite for the machine (docs/admin-guide.md): /usr/bin/python3 -m venv /opt/onite/venv && "
                  "/opt/onite/venv/bin/pip install . && ln -s /opt/onite/venv/bin/onite /usr/local/bin/onite, "
                  "then run /usr/local/bin/onite cron --install (or add --force)")


def install_problem(command: str) -> str | None:
    """Why the onite that ``command`` runs should not start the night: every user cannot reach it (each job's
    monitor runs as its owner), or it lives in a home directory or a checkout; None if neither."""
    import onite

    given = [shlex.split(command)[0], sys.executable, os.path.dirname(os.path.abspath(onite.__file__))]
    paths = list(dict.fromkeys(given + [os.path.realpath(path) for path in given]))
    for path in paths:
        folder = next((f for f in [*reversed(_folders(path)), path] if not _mode(f) & 0o001), None)
        if folder is not None:
            return f"other users cannot run {path}" + (f" (only its owner may enter {folder})" * (folder != path))
    homes = [home.rstrip("/") for home in ("/root", "/home", os.path.expanduser("~")) if home.strip("/")]
    for path in paths:
        home = next((home for home in homes if path.startswith(home + "/")), None)
        if home is not None:
            return f"{path} is in the home directory {home}"
        checkout = next((folder for folder in _folders(path)[:-1]
                         if any(os.path.exists(os.path.join(folder, mark)) for mark in (".git", "pyproject.toml"))), None)
        if checkout is not None:
            return f"{path} is in the checkout {checkout}"
    return None


def _folders(path: str) -> list[str]:
    """The folders ``path`` is in, nearest first, ``/`` (or ``.``, for a relative path) last."""
    return [str(folder) for folder in PurePosixPath(path).parents]


def _mode(path: str) -> int:
    """``path``'s mode; all bits where it cannot be looked at (not this check's to say)."""
    try:
        return os.stat(path).st_mode
    except OSError:
        return 0o7777


def command_prefix() -> str:
    """This onite as cron can run it: an absolute path (cron's PATH is short), else as it was started."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "onite"
    if argv0.endswith("__main__.py") or argv0 == "-m" or argv0 == "-c":
        return f"{shlex.quote(sys.executable)} -m onite"
    found = shutil.which(argv0) if os.sep not in argv0 else os.path.abspath(argv0)
    return shlex.quote(found or argv0)


def crontab_entries(spool_root: object, schedule: Sequence[str], command: str) -> list[str]:
    """The crontab entries that start ``onite run`` at each time of ``schedule`` (ONITE_STARTED_BY=cron)."""
    # --quiet: cron would mail every night's log lines; onite.log keeps them, and failures notify
    return [f"{' '.join(expr.split())} ONITE_STARTED_BY=cron {command} run --quiet --spool {shlex.quote(str(spool_root))}"
            for expr in schedule]

