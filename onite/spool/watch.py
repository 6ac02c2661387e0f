"""Which queued jobs carry a not-before time, and when the daemon must wake for them.

The daemon sleeps between drains, yet a job spooled with ``--at`` (or a
recurring instance, or a retry waiting out its back-off) must start when its
time comes. ``TimedWatch`` keeps, for every queued job, its kernel ctime and
the few header fields that matter (``at:``, ``pin:``), and:

- lists a queue folder again only when its mtime changed (onite.spool.index);
- reads the header of a job only when its name is new to it, and only up to
  the first ``env:`` line (the header's options come before the environment);
- asks whether a job is held of the index's current markers in hold/
  (onite.spool.index.HoldIndex) each time, never of the job's file.

A job is *due* at max(not-before, ctime): a job spooled with a not-before
time already past is due when it appears. ``next_due(mark)`` ignores jobs due
at or before ``mark``, the start of the daemon's last drain: a drain looked at
those and left them (held, pinned elsewhere, waiting for a dependency, or
past the window), so they wait for the next scheduled drain instead of waking
the daemon again and again.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from onite.spool.index import QueueIndex
from onite.core.timeparse import parse_stamp

HEADER_LIMIT = 64 << 10  # submit writes at: and pin: within a job's first ~30 KiB (before env:, tried: and unknown lines)


@dataclass(slots=True)
class _Seen:
    """The few fields of a queued file that decide when the daemon must wake for it."""

    ctime_ns: int
    not_before: datetime | None = None
    pin: str | None = None
    uid: int = -1

    def due_at(self) -> datetime | None:
        if self.not_before is None:
            return None
        entered = datetime.fromtimestamp(self.ctime_ns / 1e9).astimezone()
        return max(self.not_before, entered)


class TimedWatch:
    """Not-before times of the queued jobs this host may run, kept current cheaply."""

    def __init__(self, folders: list[tuple[int, Path]], host: str, hold_dir: Path) -> None:
        self.index = QueueIndex(folders, hold_dir=hold_dir)
        self.host = host
        self.jobs: dict[tuple[int, str], _Seen] = {}
        self.header_reads = 0  # how many job headers were read (tests and benchmarks look)
        self._listings = -1

    def set_folders(self, folders: list[tuple[int, Path]]) -> None:
        self.index.set_folders(folders)
        self._listings = -1

    def refresh(self) -> None:
        self.index.refresh()
        if self.index.listings != self._listings:
            self._listings = self.index.listings
            present = set()
            for cand in self.index.candidates():
                key = (cand.rank, cand.name)
                present.add(key)
                if key not in self.jobs:
                    self._look(key, cand.path)
            for key in [k for k in self.jobs if k not in present]:
                del self.jobs[key]

    def _look(self, key: tuple[int, str], path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            self.jobs.pop(key, None)
            return
        if not stat.S_ISREG(st.st_mode):
            self.jobs[key] = _Seen(st.st_ctime_ns)  # never runs: the driver moves it aside
            return
        if st.st_nlink != 1:
            self.jobs.pop(key, None)  # being spooled right now: look again at the next listing
            return
        fields = _header_fields(path, st)
        self.header_reads += 1
        # a time the job file cannot hold (naive, or out of bounds) makes it damaged: the driver refuses it
        not_before = parse_stamp(fields.get("at"))
        self.jobs[key] = _Seen(st.st_ctime_ns, not_before, fields.get("pin"), st.st_uid)

    def next_due(self, mark: datetime | None) -> datetime | None:
        """The earliest due time after ``mark`` of a timed job this host may run."""
        best = None
        holds = self.index.holds
        for (_, name), seen in self.jobs.items():
            if seen.not_before is None or (seen.pin and seen.pin != self.host):
                continue
            if holds.held(name, seen.uid):
                continue
            due = seen.due_at()
            if (mark is None or due > mark) and (best is None or due < best):
                best = due
        return best

    def timed(self) -> int:
        return sum(1 for s in self.jobs.values() if s.not_before is not None)


def _header_fields(path: Path, st: os.stat_result) -> dict[str, str]:
    """``at`` and ``pin`` from a job file's header, reading no further than its first env: line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ELOOP, errno.EACCES):
            return {}
        raise
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or fst.st_ino != st.st_ino:
            return {}
        # one bounded read: the daemon looks at every new name inline, and a user's file of a long
        # header line (a sparse hole) must cost it no more than any other file
        data = os.read(fd, HEADER_LIMIT)
    finally:
        os.close(fd)
    fields = {}
    for line in data.split(b"\n\n", 1)[0].split(b"\n"):
        if line.startswith(b"env: "):
            break
        key, sep, value = line.partition(b": ")
        if sep and key in (b"at", b"pin"):
            fields[key.decode()] = value.decode("utf-8", "replace")
    return fields
