"""The run record ``running/HOST/NAME@run``: what a run's driver and monitor say about it.

It is a file of JSON lines, appended to and never rewritten, in a folder
only root may write (world-readable, so ``onite list`` shows who runs what):

    {"record": 2, "run_id": …, "name": …, "rank": 3, "attempt": 1, "started": …, …}   the driver, before the start
    {"event": "monitor", "pid": 4711, "ticks": 123456}                             the monitor, first
    {"event": "job", "pid": 4712}                                                  the job is running
    {"event": "ended", "status": 0, "at": "…"}                                     how it ended (a wait status)
    {"event": "failed", "reason": "cannot enter its directory …", "at": "…"}      it could not be started

The driver creates the file and writes the first line before it forks the
job's monitor; the monitor appends the others, each with one write(2) on an
O_APPEND descriptor, so a reader sees whole lines plus at most one partial
last line, which it ignores. Because the monitor records how the job ended
before anyone acts on it, that outlives the driver (docs/job-control.md,
"Exactly once"); the order of the lines is what recovery decides from:

- no ``monitor`` line: the job was never started (the monitor writes it
  before it forks the job, while it still holds the driver lock it
  inherited, so no other driver can recover the claim in between);
- ``ended`` or ``failed``: how it ended, whether or not a driver was alive;
- ``monitor`` and no end: it runs, or ran while its monitor was killed.

Records written by onite before version 2 are one JSON object with the
process ids; ``read`` returns them too (``version`` 1).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

VERSION = 2
MAX_RECORD = 1 << 20  # bytes read of a record: it holds a few short lines


class RecordError(Exception):
    """A run record that cannot be created or extended (the message says why)."""


@dataclass(frozen=True)
class RunRecord:
    """What a run record says (``read``)."""

    version: int
    info: dict  # the driver's first line
    monitor_pid: int | None = None
    monitor_ticks: int | None = None
    job_pid: int | None = None
    status: int | None = None  # the job's wait status, once it ended
    failed: str | None = None  # why it could not be started
    ended_at: str | None = None  # ISO 8601, when the monitor saw it end
    events: tuple[dict, ...] = field(default=())

    @property
    def started_job(self) -> bool:
        """Was the job's process ever forked? (Not before the monitor line.)"""
        return self.monitor_pid is not None or self.version < VERSION

    @property
    def ended(self) -> bool:
        return self.status is not None or self.failed is not None

    def get(self, key: str, default=None):
        return self.info.get(key, default)


def create(path: str, info: dict) -> int:
    """Create the record at ``path`` holding ``info`` as its first line; return an O_APPEND
    descriptor for the monitor (the caller closes it). A stale record of a dead run is replaced.

    Raises:
        RecordError: it cannot be written (a full disk, a missing folder): start nothing.
    """
    line = _line({"record": VERSION, **info})
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
            _write_all(fd, line)
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
    _write_all(fd, _line(event))


def _line(data: dict) -> bytes:
    return (json.dumps(data, separators=(",", ":")) + "\n").encode()


def _write_all(fd: int, data: bytes) -> None:
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


def parse(data: bytes) -> RunRecord | None:
    """The record ``data`` holds (see ``read``); None if its first line is not a JSON object."""
    if not data.endswith(b"\n") and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]  # a partial last line is being written: not yet there
    lines = data.split(b"\n")
    first = _object(lines[0])
    if first is None:
        return None
    if "record" not in first:  # version 1: one object, the process ids in it
        return RunRecord(version=1, info=first, job_pid=_int(first.get("pid")))
    values: dict = {"monitor_pid": None, "monitor_ticks": None, "job_pid": None, "status": None,
                    "failed": None, "ended_at": None}
    events = []
    for raw in lines[1:]:
        event = _object(raw)
        if event is None:
            continue
        events.append(event)
        kind = event.get("event")
        if kind == "monitor":
            values["monitor_pid"], values["monitor_ticks"] = _int(event.get("pid")), _int(event.get("ticks"))
        elif kind == "job":
            values["job_pid"] = _int(event.get("pid"))
        elif kind == "ended" and _int(event.get("status")) is not None:
            values["status"] = _int(event.get("status"))
            values["ended_at"] = event.get("at") if isinstance(event.get("at"), str) else None
        elif kind == "failed":
            values["failed"] = str(event.get("reason") or "it could not be started")
            values["ended_at"] = event.get("at") if isinstance(event.get("at"), str) else None
    version = _int(first.get("record")) or VERSION
    return RunRecord(version=version, info=first, events=tuple(events), **values)


def _object(raw: bytes) -> dict | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and -(1 << 62) < value < 1 << 62 else None
