"""A job's captured output, ``stdout/NAME`` (and ``stdout/NAME@stderr`` when stderr is kept apart).

The driver creates the files, owned by the job's user, mode 0600, before the
job runs (``open_output``): a fresh run never writes through an older file
or one planted in its place. Only the job's owner and root may read them
(``open_job_output``), whatever their mode says.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from onite.core.errors import NotFound, Refused, SpoolIOError
from onite.core.names import check_name
from onite.spool.paths import SpoolDir
from onite.spool.scan import user_name
from onite.core.policy import owner_or_root


def open_output(path: Path, owner: tuple[int, int] | None, *, append: bool) -> int:
    """Create (or, for a retry, reopen) the job's output file, owned by ``owner`` (uid, gid; None:
    this process), mode 0600; a descriptor open for appending.

    A fresh run replaces an older output of the same name: the old file is
    unlinked first, so a file planted in its place is never written through.

    Raises:
        OSError: it cannot be made (the caller says why the job could not start).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    if append:
        try:
            fd = os.open(path, flags)
            st = os.fstat(fd)
            if owner is None or st.st_uid == owner[0]:
                return fd
            os.close(fd)
        except FileNotFoundError:
            pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # an older output (or something planted): never write through it
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    if owner is not None:
        os.fchown(fd, *owner)
    os.fchmod(fd, 0o600)
    return fd


def open_job_output(spool: SpoolDir, name: str, caller_uid: int, *, stderr: bool = False) -> BinaryIO:
    """Open the captured output of the latest (or running) run of ``name`` for reading: its stdout
    (with its stderr, unless it was kept apart), or with ``stderr`` its kept-apart stderr.

    Raises:
        InvalidInput: a bad name.
        NotFound: no output kept for that name; with ``stderr``, also: its stderr was not kept apart.
        Refused: it belongs to another user.
    """
    check_name(name)
    path = spool.stderr_path(name) if stderr else spool.output_path(name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if stderr:
            _no_stderr(spool, name, caller_uid)
        raise _no_output(spool, name) from None
    except PermissionError:
        raise Refused(f"the output of {name!r} belongs to {user_name(os.lstat(path).st_uid)}",
                      "only its owner and root may read it") from None
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    st = os.fstat(fd)
    if not owner_or_root(caller_uid, st.st_uid):
        os.close(fd)  # readable by mode, but output is private to its owner
        raise Refused(f"the output of {name!r} belongs to {user_name(st.st_uid)}", "only its owner and root may read it")
    if st.st_size == 0:  # made before the job's start, which may have failed: say so rather than print nothing
        never = _never_started(spool, name)
        if never is not None:
            os.close(fd)
            raise never
    return os.fdopen(fd, "rb")


def _never_started(spool: SpoolDir, name: str) -> NotFound | None:
    """The error for an output file its job never wrote because it never started (its result says
    why: its directory was gone, its interpreter missing); None if it ran."""
    from onite.core.errors import OniteError
    from onite.spool.results import read_result
    from onite.spool.scan import is_live

    try:
        if is_live(spool, name):  # a new run: its output is empty so far, the result is an earlier run's
            return None
        result = read_result(spool, name)
    except OniteError:
        return None
    if result is not None and result.started is None and result.reason:
        return NotFound(f"job {name!r} did not run: {result.reason}", "see onite list --all")
    return None


def newer_run_note(spool: SpoolDir, name: str, owner: int) -> str | None:
    """What ``output`` says beside a finished run's output when ``owner``'s job ``name`` is queued
    again: the output is of the earlier run, and the new one has not started (a user who spools the
    same name each day would read yesterday's as today's). None if no such job is queued."""
    from onite.core.errors import OniteError
    from onite.spool.queued import find_queued

    try:
        queued = [entry for entry in find_queued(spool, name) if entry.uid == owner]
    except OniteError:
        return None
    if not queued:
        return None
    return (f"a new run of {name} is queued and has not started: this is the output of its earlier run "
            f"(onite output {name} -f waits for the new one)")


def _no_output(spool: SpoolDir, name: str) -> NotFound:
    """Why ``name`` has no output file, as far as the spool says: it is queued or starting, it never
    ran (its result says why: a failed dependency, a missing directory), or there is no such job."""
    from onite.core.errors import OniteError
    from onite.spool.results import read_result
    from onite.spool.scan import is_live

    try:
        if is_live(spool, name):
            return NotFound(f"job {name!r} has no output yet", f"it has not started; onite output {name} -f waits for it")
        result = read_result(spool, name)
    except OniteError:  # damaged or unreadable: no reason to give
        result = None
    if result is not None and result.started is None and result.reason:
        return NotFound(f"job {name!r} did not run: {result.reason}", "see onite list --all")
    if result is None and not spool.done_dir.joinpath(name).exists():
        return NotFound(f"no job {name!r} is queued, running or finished", "check the name with onite list --all")
    return NotFound(f"no output kept for job {name!r}", "retention removed it (see onite list --all)")


def _no_stderr(spool: SpoolDir, name: str, caller_uid: int) -> None:
    """No stdout/NAME@stderr: if NAME's output is there, its stderr is in it (the driver removes a
    stale NAME@stderr when a job of that name starts with its stderr merged).

    Raises:
        Refused: the output belongs to another user.
        NotFound: its stderr went with its stdout.
    """
    try:
        owner = os.lstat(spool.output_path(name)).st_uid
    except FileNotFoundError:
        return
    except OSError as err:
        raise SpoolIOError(spool.output_path(name), "looking at", err) from None
    if not owner_or_root(caller_uid, owner):
        raise Refused(f"the output of {name!r} belongs to {user_name(owner)}", "only its owner and root may read it")
    raise NotFound(f"job {name!r} kept stderr with its stdout (it was spooled without --stderr-separate)",
                   f"read it with: onite output {name}")
