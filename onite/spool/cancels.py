"""The cancel inbox, SPOOL/cancel/: jobs withdrawn from their queue, and requests to cancel a job.

A user can rename, chmod or remove only their own files in the sticky queue
folders, and cannot touch running/ or jobsdone/ at all. So:

- cancelling your own queued job moves it into cancel/ at once (``withdraw``:
  one rename, so it can never run after that); a driver files it into
  jobsdone/ later (``file_withdrawn``), as root, and root and the owner of a
  personal spool file it at once;
- everything else (a running job, or someone else's job where own_only =
  false allows it) is a request (``request_cancel``): an empty file
  cancel/NAME@TOKEN owned by the requester, which the driver honours only if
  the rules allow that requester to cancel that job (onite.drain.cancels,
  docs/security.md).

Anyone can put anything in cancel/: what is filed is checked where no user
can change it, and what is not a withdrawn job file is set aside in
refused/ (``NotAJob``).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from onite.core.errors import EXIT_REFUSED, JobFormatError, NotFound, OniteError, SpoolIOError
from onite.core.job import Job
from onite.core.jobfile import decode
from onite.core.names import SIDE
from onite.core.state import JobState, Result, unrun_result
from onite.spool.filecheck import SLACK, read_up_to
from onite.spool.files import change_state, discard, move_file
from onite.spool.holds import remove_holds
from onite.spool.paths import SpoolDir
from onite.spool.results import may_replace_result, write_result
from onite.spool.scan import Entry, user_name


def withdraw(spool: SpoolDir, entry: Entry) -> Path:
    """Move a queued job into cancel/ (it can no longer run). Returns its new path.

    Raises:
        NotFound: a driver claimed it first.
    """
    target = spool.cancel_dir / f"{entry.name}{SIDE}{_token()}"
    try:
        change_state(entry.name, JobState.HELD if entry.held else JobState.QUEUED, JobState.CANCELLED,
                        entry.path, target, "cancelling")
    except NotFound:
        raise NotFound(f"job {entry.name!r} started running as you cancelled it",
                       f"run onite cancel {entry.name} again to stop it") from None
    if entry.held:  # its hold markers would hold the next job of that name
        remove_holds(spool, entry.name, {entry.uid, 0} if os.geteuid() == 0 else {os.geteuid()})
    return target


def request_cancel(spool: SpoolDir, name: str) -> Path:
    """Leave an empty request file cancel/NAME@TOKEN for the drivers."""
    path = spool.cancel_dir / f"{name}{SIDE}{_token()}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        os.close(fd)
    except OSError as err:
        raise SpoolIOError(path, "asking the driver to cancel", err) from None
    return path


class NotAJob(OniteError):
    """Something in cancel/ that is not a withdrawn job file (a folder, a link, a fifo, a hard link)."""

    exit_code = EXIT_REFUSED


@dataclass(frozen=True)
class Filed:
    """What ``file_withdrawn`` did: ``result`` is the cancelled result it wrote (None if it wrote none:
    ``note`` says why), ``job`` the withdrawn job file as read (None if damaged)."""

    result: Result | None
    job: Job | None
    note: str = ""


def file_withdrawn(spool: SpoolDir, pending: Path, *, by: str, now: datetime, rank: int | None = None) -> Filed | None:
    """Turn a withdrawn job (cancel/NAME@TOKEN) into jobsdone/NAME with a ``cancelled`` result.

    Anyone can put anything in cancel/, so what is filed is checked where no user can change it:
    the entry is opened without following a link and must be a regular file with one link; it is
    then moved into jobsdone/ under a dot-name (a folder only root writes) and checked again
    there, so a file swapped in meanwhile is caught. Its cancelled result never replaces the kept
    result of another user's job of that name (onite.spool.results.may_replace_result): the job file is then
    set aside in refused/ and ``note`` says so.

    Returns:
        What was filed, or None if the entry was gone (another driver, or ``onite cancel``, filed it).
    Raises:
        NotAJob: it is not a job file; it was moved to refused/ (or removed).
        SpoolIOError: the spool cannot be written.
    """
    name = pending.name.partition(SIDE)[0]
    try:
        fd = os.open(pending, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as err:  # a symlink (ELOOP), a fifo without a writer is fine (O_NONBLOCK), …
        _set_aside(spool, pending, name, f"not a job file ({err.strerror})")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            what = "a hard link" if stat.S_ISREG(st.st_mode) else "not a regular file"
            os.close(fd)
            fd = -1
            _set_aside(spool, pending, name, what)
        # bounded: anyone can drop a file in cancel/, and the driver reading it runs as root
        data = read_up_to(fd, spool.config.max_job_size + SLACK)
    finally:
        if fd >= 0:
            os.close(fd)
    staged = spool.done_dir / f".{name}@cancelled.{os.getpid()}.{os.urandom(3).hex()}.tmp"
    try:
        move_file(pending, staged, "filing the cancelled job")
    except NotFound:
        return None  # filed meanwhile by someone else: not an error
    try:
        now_st = os.lstat(staged)
    except FileNotFoundError:
        return None
    if (now_st.st_dev, now_st.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now_st.st_mode) \
            or now_st.st_nlink != 1:
        _set_aside(spool, staged, name, "it was swapped while it was filed")
    try:
        job = decode(data)
        priority, urgent, submitted = job.priority, job.urgent, job.submitted
    except JobFormatError:  # a damaged file is still filed: the cancel must not fail on it
        job, priority, urgent, submitted = None, rank or 0, rank == 0, now
    if not may_replace_result(spool, name, st.st_uid):
        move_file(staged, spool.refused_path(name, now), "setting aside a cancelled job")
        return Filed(None, job, f"not filed over the kept result of another user's {name} (kept in refused/)")
    result = unrun_result(name=name, uid=st.st_uid, user=user_name(st.st_uid), state=JobState.CANCELLED,
                          reason=f"cancelled by {by}", host="", now=now, job=job, priority=priority, urgent=urgent,
                          submitted=submitted)
    try:
        write_result(spool, result)
        move_file(staged, spool.done_dir / name, "filing the cancelled job")
    except OniteError:
        _put_back(spool, staged, pending, name)  # the job is all that is left of it: never lose it
        raise
    return Filed(result, job)


def _put_back(spool: SpoolDir, staged: Path, pending: Path, name: str) -> None:
    """A withdrawn job that could not be filed (a full disk) goes back into cancel/, to be filed by
    the next look once there is room (a rename needs none); failing that, into refused/."""
    for target in (pending, spool.refused_dir / f"{name}{SIDE}cancel.{os.urandom(4).hex()}"):
        try:
            os.rename(staged, target)
            return
        except OSError:
            continue


def _set_aside(spool: SpoolDir, path: Path, name: str, why: str) -> None:
    """Move what is not a job out of cancel/ (into refused/, where only root looks), then raise NotAJob."""
    target = spool.refused_dir / f"{name}{SIDE}cancel.{os.urandom(4).hex()}"
    try:
        os.rename(path, target)
    except FileNotFoundError:
        pass
    except OSError:
        discard(path)
    raise NotAJob(f"{path.name} in cancel/ is {why}", "it was set aside in refused/")




def _token() -> str:
    return f"{os.getpid()}.{os.urandom(4).hex()}"
