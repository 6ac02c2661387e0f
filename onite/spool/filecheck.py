"""Which files in a world-writable spool folder root may trust enough to act on.

Queued jobs (jobs/) and recurring-job templates (recur/) live in sticky,
world-writable folders, and root reads them to run their text as their
owner. A file is trusted only if it is a regular file with one link (not a
symlink, fifo, device or a hard link to someone else's file), owned by a
real account, not writable by group or others, without setuid/setgid bits,
and not absurdly large. The file is opened with O_NOFOLLOW|O_NONBLOCK and
checked again on the open descriptor, so a file swapped in between the
look and the open is caught (docs/security.md).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from onite.core.errors import Refused
from onite.core.job import Job
from onite.core.jobfile import decode

SLACK = 8 << 20  # a job file is its text plus a header (the environment): allow this much beyond max_job_size


class BadFile(Exception):
    """A spool file that is not a job (or template) onite may act on."""


class Settling:
    """The type of SETTLING (it has that one value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SETTLING"


SETTLING = Settling()  # not a problem, not yet trusted: a submit's link-then-unlink in progress


def file_problem(st: os.stat_result, *, max_size: int, now_ns: int, resolve_uid: Callable[[int], object],
                 may_settle: bool = True) -> str | Settling:
    """Why a spool file must never be acted on, SETTLING if it is a submit's
    link-then-unlink in progress (look again soon), or "" if it may be trusted.
    ``resolve_uid`` looks up the owner's account, raising Refused if there is none
    (onite.exec.identity.resolve; the driver passes one that remembers).
    ``may_settle=False``: the file can no longer be settling (the driver has claimed
    it), so a second hard link is a problem like any other.
    """
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link, not a job file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a fifo, device or folder)"
    if st.st_nlink != 1:
        # how long a second link may be a submit in progress is the caller's to bound (the driver
        # counts from when it first saw it: the ctime is the owner's to keep fresh)
        return SETTLING if may_settle and st.st_nlink == 2 else f"has {st.st_nlink} hard links"
    if st.st_mode & 0o022:
        return "writable by users other than its owner"
    if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
        return "has the setuid or setgid bit"
    try:
        resolve_uid(st.st_uid)
    except Refused:
        return f"its owner uid {st.st_uid} has no account on this machine"
    if st.st_size > max_size + SLACK:
        return f"larger than max_job_size ({st.st_size} bytes)"
    return ""


def read_job_file(path: Path, max_size: int, *, one_link: bool = False) -> tuple[Job, os.stat_result]:
    """Open ``path`` without following a symlink and decode it; the stat is of the open file.
    ``one_link``: refuse a file with a second hard link (a reader that shows what it reads: links
    cost a user nothing, and would have root read and decode one large file over and over).

    Raises:
        BadFile: not a regular file, a symlink, too large, or (``one_link``) a hard link.
        JobFormatError: not a job file.
        OSError: it vanished or cannot be read.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP:  # a symlink swapped in since we looked
            raise BadFile("a symbolic link, not a job file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadFile("not a regular file")
        if one_link and st.st_nlink != 1:
            raise BadFile("a hard link, not a job file")
        data = read_up_to(fd, max_size + SLACK)
        if len(data) > max_size + SLACK:
            raise BadFile("larger than max_job_size")
    finally:
        os.close(fd)
    return decode(data), st


def read_up_to(fd: int, limit: int) -> bytes:
    """What ``fd`` holds from its offset to its end, or, if that is more than ``limit`` bytes, the
    first chunks read past it (the caller tells by the length): a file that grows, or is huge,
    never makes us hold all of it."""
    chunks, size = [], 0
    while size <= limit and (chunk := os.read(fd, 1 << 20)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
