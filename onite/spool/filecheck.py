"""Which files in a world-writable spool folder (jobs/, recur/) root may trust enough to act on.

Trusted: a regular file of one link (not a symlink, fifo, device, or a hard link to someone else's file),
owned by a real account, writable by its owner only, without setuid/setgid bits, not absurdly large. It is
opened with O_NOFOLLOW|O_NONBLOCK and checked again on the descriptor, so a file swapped in between the look
and the open is caught (docs/security.md).
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
    """The type of SETTLING: not a problem, not yet trusted: a submit's link-then-unlink in progress."""

    def __repr__(self) -> str:
        return "SETTLING"


SETTLING = Settling()


def file_problem(st: os.stat_result, *, max_size: int, resolve_uid: Callable[[int], object],
                 may_settle: bool = True) -> str | Settling:
    """Why a spool file must never be acted on, SETTLING (look again soon), or "" if it may be trusted.
    ``resolve_uid`` raises Refused for a uid with no account; ``may_settle=False``: a second link is a problem."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link, not a job file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a fifo, device or folder)"
    if st.st_nlink != 1:  # how long it may settle is the caller's to bound (the ctime is the owner's to keep fresh)
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


def is_settling(st: os.stat_result, now_ns: int) -> bool:
    """A second hard link that is a submit's link-then-unlink in progress, by the ctime (its owner can keep
    it fresh): an ``onite run`` looks at recur/ once, so it cannot count from its first sight as the picker does."""
    return st.st_nlink == 2 and stat.S_ISREG(st.st_mode) and now_ns - st.st_ctime_ns < 2_000_000_000


HEAD_LIMIT = 256 << 10  # bytes read_job_head reads past a header's end at most, for the first line of the body


def read_job_file(path: Path, max_size: int, *, one_link: bool = False) -> tuple[Job, os.stat_result]:
    """Open ``path`` without following a symlink and decode it; the stat is of the open file. ``one_link``:
    refuse a second hard link (links cost nothing, and would have root decode one large file over and over).
    Raises BadFile (as open_checked, or too large); JobFormatError; OSError: it vanished or cannot be read."""
    fd, st = open_checked(path, one_link)
    try:
        return decode(_read_rest(fd, b"", max_size)), st
    finally:
        os.close(fd)


def read_job_head(path: Path, max_size: int, *, one_link: bool = False) -> tuple[Job, os.stat_result]:
    """As read_job_file, with the body cut after its first line (whose ``#!`` is checked): a body may be a
    sparse hole of max_job_size, free to its owner and costly to each reader. A header is read to its end (a
    large environment), but only to its first NUL byte, which makes it no job file whatever follows: a hole is
    NULs, and a header of real bytes costs its owner the disk it takes."""
    data, st = read_head_bytes(path, max_size, one_link=one_link)
    return decode(data), st


def read_head_bytes(path: Path, max_size: int, *, one_link: bool = False) -> tuple[bytes, os.stat_result]:
    """The bytes read_job_head decodes (onite.core.jobfile.waits_for_nothing may need none). Raises BadFile, OSError."""
    fd, st = open_checked(path, one_link)
    try:
        if st.st_size > max_size + SLACK:
            raise BadFile("larger than max_job_size")
        data, end = bytearray(), -1
        while (end < 0 or len(data) < end + HEAD_LIMIT) and (chunk := os.read(fd, 64 << 10)):
            looked = max(len(data) - 1, 0)  # searched already, but for a "\n\n" across the chunks
            data += chunk
            if len(data) > max_size + SLACK:
                raise BadFile("larger than max_job_size")
            if end < 0:
                end = data.find(b"\n\n", looked)
                if data.find(b"\0", looked, end if end >= 0 else len(data)) >= 0:
                    break  # decode refuses it for that NUL
            if end >= 0 and data.find(b"\n", end + 2) >= 0:
                break  # the header and the body's first line
    finally:
        os.close(fd)
    line = data.find(b"\n", end + 2) if end >= 0 else -1
    return bytes(data if line < 0 else data[:line + 1]), st


def _read_rest(fd: int, data: bytes, max_size: int) -> bytes:
    """``data`` (read of ``fd`` so far) and the rest of the file. Raises BadFile: larger than max_job_size."""
    data += read_up_to(fd, max_size + SLACK - len(data))
    if len(data) > max_size + SLACK:
        raise BadFile("larger than max_job_size")
    return data


def open_checked(path: Path, one_link: bool = False) -> tuple[int, os.stat_result]:
    """``path`` opened without following a symlink or waiting for a lease, with its stat: a regular file
    (``one_link``: of one link). Raises BadFile: a symlink, socket, leased or other file swapped in; OSError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as err:
        if err.errno == errno.ELOOP:  # a symlink swapped in since we looked
            raise BadFile("a symbolic link, not a job file") from None
        if err.errno == errno.ENXIO:  # a socket swapped in since we looked: it cannot be opened
            raise BadFile("a socket, not a job file") from None
        if err.errno == errno.EAGAIN:  # its owner holds a lease on it (F_SETLEASE): no reader may open it
            raise BadFile("leased by its owner, not a job file to read") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadFile("not a regular file")
        if one_link and st.st_nlink != 1:
            raise BadFile("a hard link, not a job file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_up_to(fd: int, limit: int) -> bytes:
    """What ``fd`` holds from its offset, up to the first chunk past ``limit`` bytes (the caller tells by the
    length): a huge or growing file is never held whole."""
    chunks, size = [], 0
    while size <= limit and (chunk := os.read(fd, 1 << 20)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
