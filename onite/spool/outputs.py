"""A job's captured output, ``stdout/NAME`` (and ``stdout/NAME@stderr`` when stderr is kept apart): made
afresh, the job's user's, mode 0600, so a run never writes through an older or planted file; only the
owner and root may read them, whatever their mode says.
"""

from __future__ import annotations

import errno
import os
import stat
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from onite.core.errors import NoTrace, NotFound, OniteError, Refused, SpoolIOError
from onite.core.names import shown
from onite.core.policy import owner_or_root
from onite.spool.files import discard
from onite.spool.paths import SpoolDir
from onite.spool.accounts import user_name
from onite.spool.scan import Withdrawn, find_queued, key_uid, live_entries, namesake_error


def run_tail(path: Path, uid: int, started: datetime | None, finished: datetime, *, max_bytes: int,
             lines: int) -> bytes | None:
    """The last ``lines`` whole lines among the last ``max_bytes`` of the output at ``path``, if it is a regular
    file of ``uid`` written between ``started`` and ``finished`` (2 s of slack), else None: another run's
    file, or one planted there, is not this run's."""
    if started is None:
        return None  # never ran: a file there is an older run's
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or \
                not started.timestamp() - 2 <= st.st_mtime <= finished.timestamp() + 2:
            return None
        start = max(0, st.st_size - max_bytes)
        data = os.pread(fd, max_bytes, start) if lines else b""
    except OSError:
        return None
    finally:
        os.close(fd)
    return last_lines(data, cut=start > 0, lines=lines)


def last_lines(data: bytes, *, cut: bool, lines: int) -> bytes:
    """The last ``lines`` lines of ``data``; ``cut``: data starts inside a line, which is dropped."""
    if cut:
        newline = data.find(b"\n")
        data = data[newline + 1:] if newline >= 0 else b""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    parts = parts[len(parts) - lines:] if lines < len(parts) else parts
    return b"\n".join(parts) + (b"\n" if parts else b"")


def copy_data(fd: int, write) -> bool:
    """Copy output file ``fd`` from its offset to its size now to ``write``, leaving the offset there; True if
    anything was copied. Holes are skipped: its owner may truncate it far longer at no cost, and a reader would
    read those NULs without bound."""
    pos = os.lseek(fd, 0, os.SEEK_CUR)
    end = os.fstat(fd).st_size
    copied = False
    while pos < end:
        try:
            pos = min(os.lseek(fd, pos, os.SEEK_DATA), end)
            stop = min(os.lseek(fd, pos, os.SEEK_HOLE), end) if pos < end else end
        except OSError as err:
            if err.errno != errno.ENXIO:  # ENXIO: a hole to the end, or the file was cut shorter
                raise
            break
        while pos < stop and (chunk := os.pread(fd, min(1 << 16, stop - pos), pos)):
            write(chunk)
            pos += len(chunk)
            copied = True
        if pos < stop:  # cut shorter meanwhile
            break
    os.lseek(fd, pos, os.SEEK_SET)
    return copied


def open_output(path: Path, owner: tuple[int, int] | None, *, append: bool) -> int:
    """A descriptor appending to the job's output file, made afresh (``append``: a retry reopens its owner's),
    owned by ``owner`` (uid, gid; None: this process), mode 0600. Raises OSError."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    if append:
        try:  # O_NONBLOCK: a lease its owner holds on it would keep this open waiting (lease-break-time)
            fd = os.open(path, flags | os.O_NONBLOCK)
            st = os.fstat(fd)
            if owner is None or st.st_uid == owner[0]:
                os.set_blocking(fd, True)
                return fd
            os.close(fd)
        except (FileNotFoundError, BlockingIOError):  # a leased file is made afresh, as another's is
            pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # an older output (or something planted): never write through it
        discard(path)
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    if owner is not None:
        os.fchown(fd, *owner)
    os.fchmod(fd, 0o600)
    return fd


def open_job_output(spool: SpoolDir, name: str, caller_uid: int, *, stderr: bool = False) -> BinaryIO:
    """The output (``stderr``: kept-apart stderr) of the latest or running run of ``name``, open for reading.
    Raises NotFound: no such output; Refused: it belongs to another user."""
    path = spool.stderr_path(name) if stderr else spool.output_path(name)
    try:  # O_NONBLOCK: a lease its owner holds on it would keep this open waiting (lease-break-time, 45 s)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        if stderr:
            _no_stderr(spool, name, caller_uid)
        raise _no_output(spool, name, caller_uid) from None
    except PermissionError as err:
        try:
            owner = os.lstat(path).st_uid
        except OSError:  # the folder itself is shut to the caller: the spool's modes went wrong
            raise SpoolIOError(path, "reading", err) from None
        raise _not_yours(name, owner) from None
    except BlockingIOError:  # its owner holds a lease on it (F_SETLEASE): opening it would wait for the kernel
        try:
            holder = user_name(os.lstat(path).st_uid)
        except OSError:
            holder = "its owner"
        raise OniteError(f"the output of {_said(name)!r} is held by {holder} (a lease on the file)",
                         f"try again once {holder} lets it go") from None
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    os.set_blocking(fd, True)
    st = os.fstat(fd)
    if not owner_or_root(caller_uid, st.st_uid):
        os.close(fd)  # readable by mode, but output is private to its owner
        raise _not_yours(name, st.st_uid)
    if st.st_size == 0:  # made before the job's start, which may have failed: say so rather than print nothing
        never = _no_output(spool, name, caller_uid, empty=True)
        if never is not None:
            os.close(fd)
            raise never
    return os.fdopen(fd, "rb")


def newer_run_note(spool: SpoolDir, name: str, owner: int) -> str | None:
    """What ``output`` says beside a finished run's output when ``owner``'s job ``name`` is queued again."""
    try:
        if not any(entry.uid == owner for entry in find_queued(spool, name)):
            return None
    except OniteError:
        return None
    return (f"a new run of {_said(name)} is queued and has not started: this is the output of its earlier run "
            f"(onite output {_said(name)} -f waits for the new one)")


def _said(key: str) -> str:
    """Job ``key`` as this process's user reads it: NAME for their own, USER:NAME else."""
    return shown(key, user_name(os.geteuid()))


def _not_yours(name: str, uid: int) -> Refused:
    return Refused(f"the output of {_said(name)!r} belongs to {user_name(uid)}", "only its owner and root may read it")


def _no_output(spool: SpoolDir, name: str, caller_uid: int, *, empty: bool = False) -> OniteError | None:
    """Why ``name`` has no output: queued or starting (another user's: not the caller's to read), never ran
    (its result says why), or no such job. ``empty``: the file is there but empty: only a run that never
    started is an error, else None."""
    from onite.spool.results import read_result  # not at import: only a missing output needs it

    try:
        state, _ = live_entries(spool, name)
        if state:  # a new run: its output is empty so far, the result is an earlier run's
            owner = key_uid(name)
            if not empty and owner is not None and not owner_or_root(caller_uid, owner):
                return _not_yours(name, owner)  # as ``output -f`` says: it would never be theirs to read
            if empty:
                return None
            if state == "held":
                return NotFound(f"job {_said(name)!r} has no output yet",
                                f"it is held; onite release {_said(name)} lets it run")
            return NotFound(f"job {_said(name)!r} has no output yet",
                            f"it has not started; onite output {_said(name)} -f waits for it")
        result = read_result(spool, name)
        if result is None and not empty and key_uid(name) in Withdrawn(spool).owners(name):  # no driver filed it yet
            return NotFound(f"job {_said(name)!r} did not run: it was cancelled", "see onite list --all")
    except OniteError:  # damaged or unreadable: no reason to give
        result = None
    if result is not None and result.started is None and result.reason:
        from onite.core.queue import reason_as_read  # only for a job that never ran: output imports no queue rules

        reason = reason_as_read(result.reason, result.user, user_name(os.geteuid()))
        return NotFound(f"job {_said(name)!r} did not run: {reason}", "see onite list --all")
    if empty:
        return None
    if result is None and not spool.done_dir.joinpath(name).exists():
        if error := namesake_error(spool, _said(name), caller_uid, kind=NoTrace):
            return error
        return NoTrace(f"no job {_said(name)!r} is queued, running or finished", "check the name with onite list --all")
    return NotFound(f"no output kept for job {_said(name)!r}", "retention removed it (see onite list --all)")


def _no_stderr(spool: SpoolDir, name: str, caller_uid: int) -> None:
    """No stdout/NAME@stderr: if NAME's output is there, its stderr is in it.
    Raises Refused: the output is another user's; NotFound: its stderr went with its stdout."""
    try:
        owner = os.lstat(spool.output_path(name)).st_uid
    except FileNotFoundError:
        return
    except OSError as err:
        raise SpoolIOError(spool.output_path(name), "looking at", err) from None
    if not owner_or_root(caller_uid, owner):
        raise _not_yours(name, owner)
    raise NotFound(f"job {_said(name)!r} kept stderr with its stdout (it was spooled without --stderr-separate)",
                   f"read it with: onite output {_said(name)}")
