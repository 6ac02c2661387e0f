"""When the sleeping daemon must wake for a queued job's not-before time (``--at``, a retry's back-off).

A folder is listed again only when it changed (onite.spool.index) and a header read once per new
name, with one bounded read; an edited job goes by its edits, read as the driver reads them, again
whenever they change. A job is due at max(not-before, ctime); one due at or before the last drain's
start was left by it, and waits for the next drain rather than wake the daemon again and again.
"""

from __future__ import annotations

import os
import stat
from datetime import datetime
from pathlib import Path

from onite.core.jobfile import WATCHED_HEAD
from onite.core.record import Record
from onite.core.timeparse import parse_stamp
from onite.spool.edits import EDITS_READ, read_edited
from onite.spool.filecheck import BadFile, open_checked
from onite.spool.index import QueueIndex


class _Seen(Record):
    ctime_ns: int
    not_before: datetime | None = None  # as its newest edit says it, else as its file does
    pin: str | None = None
    uid: int = -1
    file_at: datetime | None = None  # its file's own at:
    edits: tuple = ()  # (path, ctime_ns) of the edits its not_before was read from


class TimedWatch:
    """Not-before times of the queued jobs this host may run, kept current cheaply."""

    def __init__(self, folders: list[tuple[int, Path]], host: str, hold_dir: Path, edit_dir: Path | None = None,
                 max_size: int = 0) -> None:
        self.index = QueueIndex(folders, hold_dir=hold_dir, edit_dir=edit_dir)
        self.host, self.max_size = host, max_size  # max_job_size: an edit is read as the driver reads it
        self.jobs: dict[tuple[int, str], _Seen] = {}
        self.header_reads = 0
        self._listings = -1
        self._edits: dict | None = None  # edit/'s markers as last looked at

    def set_folders(self, folders: list[tuple[int, Path]]) -> None:
        self.index.set_folders(folders)
        self._listings = -1

    def refresh(self) -> None:
        self.index.refresh()
        edits = self.index.edits.found
        if self.index.listings != self._listings or edits is not self._edits:
            self._listings, self._edits = self.index.listings, edits
            present = set()
            for cand in self.index.candidates():
                key = (cand.rank, cand.name)
                present.add(key)
                if key not in self.jobs:
                    self._look(key, cand.path)
                if key in self.jobs and (edits or self.jobs[key].edits):
                    self._edited(key, cand.path)
            self.jobs = {key: seen for key, seen in self.jobs.items() if key in present}

    def _edited(self, key: tuple[int, str], path: Path) -> None:
        """Its not-before time as the driver takes it, with its edits, read again only when they change."""
        seen = self.jobs[key]
        edits = self.index.edits.of(key[1])
        mark = tuple((edit.path, edit.ctime_ns) for edit in edits[-EDITS_READ:])
        if mark == seen.edits:
            return
        job = read_edited(path, key[1], seen.uid, {key[1]: edits}, self.max_size) if mark else None
        self.header_reads += len(mark)
        self.jobs[key] = seen._replace(not_before=job.not_before if job is not None else seen.file_at, edits=mark)

    def _look(self, key: tuple[int, str], path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):
            self.jobs[key] = _Seen(st.st_ctime_ns)  # never runs: the driver moves it aside
        elif st.st_nlink == 1:  # else being spooled right now: looked at again at the next listing
            fields = _header_fields(path, st)
            self.header_reads += 1
            # a time the job file cannot hold makes it damaged: the driver refuses it
            at = parse_stamp(fields.get("at"))
            self.jobs[key] = _Seen(st.st_ctime_ns, at, fields.get("pin"), st.st_uid, at)

    def next_due(self, mark: datetime | None) -> datetime | None:
        """The earliest due time after ``mark`` of a timed job this host may run."""
        best = None
        for (_, name), seen in self.jobs.items():
            if seen.not_before is None or (seen.pin and seen.pin != self.host) or self.index.holds.held(name, seen.uid):
                continue
            due = max(seen.not_before, datetime.fromtimestamp(seen.ctime_ns / 1e9).astimezone())
            if (mark is None or due > mark) and (best is None or due < best):
                best = due
        return best

    def timed(self) -> int:
        return sum(1 for s in self.jobs.values() if s.not_before is not None)


def _header_fields(path: Path, st: os.stat_result) -> dict[str, str]:
    """``at`` and ``pin`` from a job file's header, read no further than its first env: line."""
    try:
        fd, fst = open_checked(path)
    except (BadFile, FileNotFoundError, PermissionError):
        return {}
    try:
        if fst.st_ino != st.st_ino:
            return {}
        # one bounded read: a user's file of one long header line (a sparse hole) costs no more than any other
        data = os.read(fd, WATCHED_HEAD)  # where a job file's at: and pin: lines end (onite.core.jobfile)
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
