"""Run records on disk: ``running/HOST/NAME@run`` (the model, and what each line means: onite.core.runrecord).

A file of JSON lines, appended to and never rewritten, in a folder only root
may write (world-readable, so ``onite list`` shows who runs what). The driver
creates it and writes the first line before it forks the job's monitor; the
monitor appends the others, each with one write(2) on an O_APPEND
descriptor, so a reader sees whole lines plus at most one partial last line,
which it ignores. Its path is ``SpoolDir.run_record_path(host, name)``:
nothing builds it by hand.
"""

from __future__ import annotations

import os

from onite.core.runrecord import RunRecord, first_line, line, parse
from onite.spool.paths import RUN_RECORD, SpoolDir

MAX_RECORD = 1 << 20  # bytes read of a record: it holds a few short lines


class RecordError(Exception):
    """A run record that cannot be created or extended (the message says why)."""


def create(path: str, info: dict) -> int:
    """Create the record at ``path`` holding ``info`` as its first line; return an O_APPEND
    descriptor for the monitor (the caller closes it). A stale record of a dead run is replaced.

    Raises:
        RecordError: it cannot be written (a full disk, a missing folder): start nothing.
    """
    data = first_line(info)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in (1, 2):
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError:
            if attempt == 2:
                raise RecordError(f"cannot create {path}: it keeps existing") from None
            try:
                os.unlink(path)
            except OSError as err:
                raise RecordError(f"cannot replace {path}: {err.strerror}") from None
            continue
        except OSError as err:
            raise RecordError(f"cannot create {path}: {err.strerror}") from None
        try:
            os.fchmod(fd, 0o644)  # the umask must not hide running jobs from `onite list`
            write_all(fd, data)
        except OSError as err:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise RecordError(f"cannot write {path}: {err.strerror}") from None
        return fd
    raise AssertionError("unreachable")


def append(fd: int, event: dict) -> None:
    """Add one event line. Raises OSError (e.g. ENOSPC: the caller decides)."""
    write_all(fd, line(event))


def add_event(path: str, event: dict) -> None:
    """Append ``event`` to the record at ``path`` (a driver's ``stop`` line).

    Raises:
        RecordError: it cannot be opened or written.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise RecordError(f"cannot open {path}: {err.strerror}") from None
    try:
        write_all(fd, line(event))
    except OSError as err:
        raise RecordError(f"cannot write {path}: {err.strerror}") from None
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    # one write: O_APPEND makes it atomic against other appends; a short write of a few
    # hundred bytes does not happen on a local file system, but is finished if it does
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read(path) -> RunRecord | None:
    """The record at ``path``, or None if there is none or its first line cannot be read.

    Never raises for what the file holds: a damaged line is skipped.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_RECORD)
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse(data)


def host_records(spool: SpoolDir, host: str) -> list[RunRecord]:
    """The run records of HOST's claims that can be read, in no order."""
    folder = spool.running_dir(host)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [rec for name in names if name.endswith(RUN_RECORD) and name[0] != "."
            and (rec := read(f"{folder}/{name}")) is not None]
