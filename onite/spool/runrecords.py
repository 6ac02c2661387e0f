"""Run records ``running/HOST/NAME@run`` on disk (their lines: onite.core.runrecord): world-readable JSON
lines, each one O_APPEND write(2), so a reader sees whole lines and at most a partial last one, which it
ignores. The driver writes the first before it claims the job; the monitor and a stopping driver the rest.
"""

from __future__ import annotations

import os

from onite.core.runrecord import RunRecord, first_line, line, parse
from onite.spool.files import discard, read_small, write_all
from onite.spool.paths import RUN_RECORD, SpoolDir

MAX_RECORD = 1 << 20  # bytes read of a record: it holds a few short lines


class RecordError(Exception):
    """A run record that cannot be created or extended (the message says why)."""


def create(path: str, info: dict) -> int:
    """Create the record at ``path`` with ``info`` as its first line, replacing a dead run's; return an O_APPEND
    descriptor for the monitor. Raises RecordError: it cannot be written (then start nothing)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError:  # a stale record of a dead run
            os.unlink(path)
            fd = os.open(path, flags, 0o644)
    except OSError as err:
        raise RecordError(f"cannot create {path}: {err.strerror}") from None
    try:
        os.fchmod(fd, 0o644)  # the umask must not hide running jobs from `onite list`
        write_all(fd, first_line(info))
    except OSError as err:
        os.close(fd)
        discard(path)
        raise RecordError(f"cannot write {path}: {err.strerror}") from None
    return fd


def append(fd: int, event: dict) -> None:
    """Raises OSError (e.g. ENOSPC: the caller decides)."""
    write_all(fd, line(event))


def add_event(path: str, event: dict) -> None:
    """Append ``event`` to the record at ``path`` (a driver's ``stop`` line). Raises RecordError."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise RecordError(f"cannot open {path}: {err.strerror}") from None
    try:
        append(fd, event)
    except OSError as err:
        raise RecordError(f"cannot write {path}: {err.strerror}") from None
    finally:
        os.close(fd)


def read(path) -> RunRecord | None:
    """The record at ``path``, or None if its first line cannot be read; a damaged line is skipped."""
    try:
        return parse(read_small(path, MAX_RECORD))
    except OSError:
        return None


def host_records(spool: SpoolDir, host: str) -> list[RunRecord]:
    """The run records of HOST's claims that can be read, in no order."""
    folder = spool.running_dir(host)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [rec for name in names if name.endswith(RUN_RECORD) and name[0] != "."
            and (rec := read(f"{folder}/{name}")) is not None]
