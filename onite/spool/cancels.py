"""The cancel inbox, SPOOL/cancel/: a user's own queued job is renamed into it (``withdraw``: it can never
run after that) for a driver or root to file; any other cancel is an empty request cancel/NAME@TOKEN that
a driver honours if the rules allow (onite.drain.cancels).
"""

from __future__ import annotations

import os
import stat
from datetime import datetime
from pathlib import Path

from onite.core.errors import EXIT_REFUSED, JobFormatError, NotFound, OniteError
from onite.core.job import Job
from onite.core.jobfile import decode
from onite.core.names import SIDE, is_valid_key
from onite.core.record import Record
from onite.core.state import JobState, Result, unrun_result
from onite.spool.filecheck import SLACK, BadFile, open_checked, read_up_to
from onite.spool.files import change_state, create_marker, discard, move_file, rename_noreplace, token
from onite.spool.holds import remove_holds
from onite.spool.paths import SpoolDir
from onite.spool.results import read_result, write_result
from onite.spool.accounts import user_name
from onite.spool.scan import Entry, find_queued, find_running, key_uid


STAGED = "@cancelled."  # jobsdone/.KEY@cancelled.PID.X.tmp: a withdrawn job between file_withdrawn's two moves
STAGED_AGE = 60  # seconds: the two moves follow each other at once; a job staged this long lost its filer


def withdraw(spool: SpoolDir, entry: Entry) -> Path:
    """Move a queued job into cancel/; return its new path. Raises NotFound: a driver claimed it first."""
    target = spool.cancel_dir / f"{entry.name}{SIDE}{token()}"
    try:
        change_state(entry.name, JobState.HELD if entry.held else JobState.QUEUED, JobState.CANCELLED,
                     entry.path, target, "cancelling")
    except NotFound:
        running = bool(find_running(spool, entry.name))
        if not running and not find_queued(spool, entry.name):  # another cancel took it
            raise NotFound(f"job {entry.name!r} left its queue as you cancelled it: another cancel took it, or "
                           "it ran and ended", "see onite list --all") from None
        raise NotFound(f"job {entry.name!r} {'started running' if running else 'moved'} as you cancelled it",
                       f"run onite cancel {entry.name} again to stop it") from None
    if entry.held:  # its hold markers would hold the next job of that name
        remove_holds(spool, entry.name, {entry.uid, 0} if os.geteuid() == 0 else {os.geteuid()})
    return target


def request_cancel(spool: SpoolDir, name: str) -> Path:
    """Leave an empty request cancel/NAME@TOKEN for the drivers. Raises SpoolError, SpoolIOError."""
    return create_marker(spool.cancel_dir, name, "asking the driver to cancel")


class NotAJob(OniteError):
    """Something in cancel/ that is not a withdrawn job file (a folder, a link, a fifo, a hard link, a forgery)."""

    exit_code = EXIT_REFUSED


class Filed(Record):
    """What ``file_withdrawn`` did: the ``result`` it wrote, the ``job`` read (None: a damaged file)."""

    result: Result
    job: Job | None


def file_withdrawn(spool: SpoolDir, pending: Path, *, by: str, now: datetime, rank: int | None = None) -> Filed | None:
    """Turn a withdrawn job (cancel/NAME@TOKEN) into jobsdone/NAME with a ``cancelled`` result; None if it was
    gone. It must be a regular file of one link, and is checked again once moved under a dot-name into root's
    jobsdone/, so a file swapped in meanwhile is caught. The result is written while the job is still in
    cancel/, so a filer killed at any step leaves the job or its result.
    Raises NotAJob: it is not a job file, or a forgery (it was set aside); SpoolIOError."""
    name = pending.name.partition(SIDE)[0]
    try:
        fd, st = open_checked(pending, one_link=True)
    except FileNotFoundError:
        return None
    except BadFile as err:  # a symlink, a folder, a fifo, a hard link…
        _set_aside(spool, pending, name, str(err), now)
    except OSError as err:
        _set_aside(spool, pending, name, f"not a job file ({err.strerror})", now)
    if st.st_uid != key_uid(name):  # not read: nothing of it counts
        os.close(fd)
        _set_aside(spool, pending, name, f"a forgery: not {name.partition(':')[0]}'s file", now)
    try:  # bounded: anyone can drop a file in cancel/, and the driver reading it runs as root
        data = read_up_to(fd, spool.config.max_job_size + SLACK)
    finally:
        os.close(fd)
    try:
        job = decode(data)
    except JobFormatError:  # a damaged file is still filed (its folder's rank its priority): the cancel must not fail
        job = None
    result = unrun_result(
        name=name, uid=st.st_uid, user=user_name(st.st_uid), state=JobState.CANCELLED, reason=f"cancelled by {by}",
        host="", now=now, job=job, priority=rank or 0, urgent=job.urgent if job else rank == 0)
    write_result(spool, result)
    staged = spool.done_dir / f".{name}{STAGED}{os.getpid()}.{os.urandom(3).hex()}.tmp"
    try:
        move_file(pending, staged, "filing the cancelled job")
        now_st = os.lstat(staged)
    except (NotFound, FileNotFoundError):
        return None  # filed meanwhile by someone else: not an error
    if (now_st.st_dev, now_st.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now_st.st_mode) \
            or now_st.st_nlink != 1:
        _set_aside(spool, staged, name, "it was swapped while it was filed", now)
    try:
        move_file(staged, spool.done_dir / name, "filing the cancelled job")
    except OniteError:
        # the job is all that is left of it: back into cancel/ for the next look (a rename needs no
        # room on a full disk), failing that into refused/
        for target in (pending, spool.refused_path(name, now)):
            try:
                os.rename(staged, target)
                break
            except OSError:
                continue
        raise
    return Filed(result, job)


def _set_aside(spool: SpoolDir, path: Path, name: str, why: str, now: datetime) -> None:
    """Move what is not a job out of cancel/ into refused/, where only root looks; raise NotAJob."""
    try:
        os.rename(path, spool.refused_path(name, now))
    except FileNotFoundError:
        pass
    except OSError:
        discard(path)
    raise NotAJob(f"{path.name} in cancel/ is {why}", "it was set aside in refused/")


def finish_filings(spool: SpoolDir, now: float) -> int:
    """Put in place each cancelled job that a filer killed between its two moves left staged in jobsdone/, once
    STAGED_AGE old (its owner's file of one link, whose cancelled result is there), unless a later job file of
    the name is there; how many (``onite restart`` needs the job file)."""
    try:
        with os.scandir(spool.done_dir) as it:
            staged = [entry for entry in it if entry.name.startswith(".") and STAGED in entry.name
                      and entry.name.endswith(".tmp")]
    except OSError:
        return 0
    placed = 0
    for entry in staged:
        name = entry.name[1:entry.name.index(STAGED)]
        try:
            st = entry.stat(follow_symlinks=False)
            result = read_result(spool, name) if is_valid_key(name) else None
        except (OSError, OniteError):
            continue
        if (now - st.st_ctime < STAGED_AGE or not stat.S_ISREG(st.st_mode) or st.st_nlink != 1
                or st.st_uid != key_uid(name) or result is None or result.state != JobState.CANCELLED
                or result.uid != st.st_uid):
            continue  # not one: the hourly sweep of dot-names removes it
        try:
            placed += rename_noreplace(entry.path, str(spool.done_dir / name))
        except OSError:  # a later run's job file is there: this one is stale
            continue
    return placed


def tell_filed(filed: Filed, name: str, requester: str, log, count, notifier, config) -> None:
    """A queued job filed as cancelled (by a driver, or by root's cancel): ``count`` it, log it, tell its owner."""
    count(filed.result)
    log.event("cancelled", name, user=filed.result.user, by=requester, was="queued")
    notifier.notify(filed.result, filed.job, config)
