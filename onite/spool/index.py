"""The queue in memory, so that a look at it costs the same at 100,000 queued jobs as at 100.

``QueueIndex``, the driver's, keeps only names and kernel ctimes. A folder is listed again only when its
mtime changed, no more often than its listing's cost allows: a new file sorts after every job already
there, so noticing it late never changes which job runs next. A listing within RACY_NS of the mtime is
repeated, and the driver forces a full look before it decides there is nothing to do. A job that waits
for a lasting reason (held, pinned elsewhere) is *parked*: left out until its ctime or hold/ changes. A
name that is no job name (nor a dot-name, a write in progress) is handed out once per listing (``strays``).

``TimedWatch``, the sleeping daemon's, says when it must wake for a not-before time (``--at``, a retry's
back-off): a header is read once per new name, with one bounded read, and holds are asked of hold/'s
markers, never of the job file; an edited job goes by its edits, read as the driver reads them, again
whenever they change. A job is due at max(not-before, ctime); one due at or before the last drain's start
was left by it, and waits for the next drain rather than wake the daemon.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from onite.core.jobfile import WATCHED_HEAD
from onite.core.names import KEY_PATTERN
from onite.core.record import Record
from onite.core.timeparse import parse_stamp
from onite.spool.edits import EDITS_READ, read_edited, trusted
from onite.spool.filecheck import BadFile, open_checked
from onite.spool.paths import SpoolDir
from onite.spool.scan import RACY_NS, held_by, read_markers

RESCAN_EVERY = 1.0
FRESH_EVERY = 0.05
RESCAN_COST_SHARE = 20  # listing a big queue costs at most about 1/20 of the drain
COMPACT_AT = 64  # stale entries kept in a folder's order before it is compacted (if they are half of it)


@dataclass(slots=True)
class Candidate:
    """A queued job as the index last saw it (its file may be gone by the time it is opened)."""

    rank: int
    name: str
    path: Path
    ctime_ns: int


@dataclass(slots=True)
class _Folder:
    rank: int
    path: Path
    names: dict[str, int] = field(default_factory=dict)  # name → ctime_ns
    order: list[tuple[int, str]] = field(default_factory=list)
    head: int = 0  # order[:head] are gone: where a look for the next job starts
    mtime_ns: int = -1
    scanned_at: float = float("-inf")
    touched: bool = False  # changed by the driver's own claims since its last listing
    racy: bool = False
    sorted: bool = True
    scan_seconds: float = 0.0
    parked: dict[str, int] = field(default_factory=dict)  # name → ctime
    strays: set[str] = field(default_factory=set)  # names that are no job names, not yet handed out

    def compact_if_due(self) -> None:
        # the entries beyond one a name are stale: a name gone, or back (unparked, reordered) under a new entry
        stale = len(self.order) - len(self.names)
        if stale > COMPACT_AT and stale > len(self.order) // 2:
            seen: set[str] = set()
            self.order = [(c, n) for c, n in self.order
                          if self.names.get(n) == c and not (n in seen or seen.add(n))]
            self.head = 0

    def unpark(self) -> None:
        for name, ctime_ns in self.parked.items():
            if name not in self.names:
                self.names[name] = ctime_ns
                self.order.append((ctime_ns, name))
                self.sorted = False
        self.parked = {}


class MarkerIndex:
    """The markers of hold/ or edit/ (read_markers), listed again only when the folder changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: dict = {}
        self.mtime_ns = -1
        self.racy = False

    def refresh(self) -> bool:
        """Look at the folder again if it changed; True if the markers differ from the last look."""
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except (FileNotFoundError, NotADirectoryError):
            changed, self.found, self.mtime_ns = bool(self.found), {}, -1
            return changed
        if mtime == self.mtime_ns and not self.racy:
            return False
        started_ns = time.time_ns()
        found = read_markers(self.path)
        self.mtime_ns = mtime
        self.racy = started_ns - mtime < RACY_NS
        changed, self.found = found != self.found, found
        return changed

    def held(self, name: str, uid: int) -> bool:
        """hold/: is ``uid``'s job ``name`` held by a marker of ``uid`` or root?"""
        return held_by(self.found, name, uid)

    def of(self, key: str) -> list:
        """edit/: the edits of job ``key`` its user or root made, oldest first."""
        return trusted(self.found, key)


class QueueIndex:
    """Queued jobs in run order, kept current with as few directory listings as possible."""

    def __init__(self, spool: SpoolDir) -> None:
        self.spool = spool
        self.folders = [_Folder(rank, path) for rank, path in spool.queue_folders()]
        self.listings = 0
        self.holds = MarkerIndex(spool.hold_dir)
        self.edits = MarkerIndex(spool.edit_dir)

    def set_folders(self) -> None:
        """After a reload that changed the number of priorities: the spool's queue folders now."""
        known = {f.path: f for f in self.folders}
        self.folders = [known.get(path) or _Folder(rank, path) for rank, path in self.spool.queue_folders()]

    def held_now(self, name: str, uid: int) -> bool:
        """Is ``uid``'s job ``name`` held by hold/ as it is now (one stat if it did not change)?"""
        self._look_at_holds()
        return self.holds.held(name, uid)

    def _look_at_holds(self) -> None:
        if self.holds.refresh():  # a hold or release: every parked job is looked at again
            for folder in self.folders:
                folder.unpark()

    def refresh(self, *, force: bool = False) -> None:
        now = time.monotonic()
        self._look_at_holds()
        self.edits.refresh()  # an edit changes no hold and no host: a parked job stays parked
        for folder in self.folders:
            try:
                mtime = os.stat(folder.path).st_mtime_ns
            except FileNotFoundError:
                for part in (folder.names, folder.order, folder.parked, folder.strays):
                    part.clear()
                continue
            if not (force or mtime != folder.mtime_ns or folder.racy):
                continue
            if force:
                folder.unpark()
                limit = 0.0
            elif folder.touched:
                limit = max(RESCAN_EVERY, RESCAN_COST_SHARE * folder.scan_seconds)
            else:
                limit = min(FRESH_EVERY, RESCAN_COST_SHARE * folder.scan_seconds)
            if now - folder.scanned_at >= limit:
                self._scan(folder, mtime)

    def _scan(self, folder: _Folder, mtime_ns: int) -> None:
        started_ns = time.time_ns()
        started = time.perf_counter()
        names, order, parked = folder.names, folder.order, folder.parked
        present: set[str] = set()
        strays: set[str] = set()  # only this listing's: a name gone since an earlier one is no longer kept
        still_parked: dict[str, int] = {}
        is_name = KEY_PATTERN.fullmatch
        try:
            with os.scandir(folder.path) as it:
                for entry in it:
                    name = entry.name
                    if name in names:
                        present.add(name)
                        continue
                    if not is_name(name):
                        if name[0] != ".":
                            strays.add(name)
                        continue
                    try:  # only a new (or parked) name costs a stat
                        ctime_ns = entry.stat(follow_symlinks=False).st_ctime_ns
                    except FileNotFoundError:
                        continue
                    if parked.get(name) == ctime_ns:
                        still_parked[name] = ctime_ns
                        continue
                    present.add(name)
                    names[name] = ctime_ns
                    order.append((ctime_ns, name))
                    folder.sorted = False
        except FileNotFoundError:
            pass
        self.listings += 1
        folder.parked = still_parked
        folder.strays = strays
        if len(present) < len(names):
            for name in [n for n in names if n not in present]:
                del names[name]
        folder.mtime_ns = mtime_ns
        folder.scanned_at = time.monotonic()
        folder.scan_seconds = time.perf_counter() - started
        folder.touched = False
        folder.racy = started_ns - mtime_ns < RACY_NS
        folder.compact_if_due()

    def candidates(self) -> Iterator[Candidate]:
        for folder in self.folders:
            if not folder.sorted:
                folder.order.sort()
                folder.sorted = True
                folder.head = 0
            order, names = folder.order, folder.names
            # jobs leave from the front: skip those once, not at every look
            head, end = folder.head, len(order)
            while head < end and names.get(order[head][1]) != order[head][0]:
                head += 1
            folder.head = head
            for i in range(head, end):
                ctime_ns, name = order[i]
                if names.get(name) == ctime_ns:
                    yield Candidate(folder.rank, name, folder.path / name, ctime_ns)

    def strays(self) -> list[Candidate]:
        """Entries whose names are no job names, each once per listing that finds it (ctime_ns 0)."""
        found = []
        for folder in self.folders:
            if folder.strays:
                found.extend(Candidate(folder.rank, name, folder.path / name, 0) for name in sorted(folder.strays))
                folder.strays.clear()
        return found

    def every(self) -> Iterator[tuple[str, str, int]]:
        """Every queued job as last seen, parked ones too, unordered: (its folder, name, ctime_ns), no Path (a
        retention look at 100,000 queued jobs asks this of each)."""
        for folder in self.folders:
            where = str(folder.path)
            for names in (folder.names, folder.parked):
                for name, ctime_ns in names.items():
                    yield where, name, ctime_ns

    def paths(self, name: str) -> list[str]:
        return [f"{folder.path}/{name}" for folder in self.folders if name in folder.names or name in folder.parked]

    def __len__(self) -> int:
        return sum(self.counts().values())

    def counts(self) -> dict[int, int]:
        return {folder.rank: len(folder.names) + len(folder.parked) for folder in self.folders}

    def _folder(self, rank: int) -> _Folder | None:
        return next((folder for folder in self.folders if folder.rank == rank), None)

    def forget(self, candidate: Candidate) -> None:
        """The driver moved this job out of its folder (claimed, failed or refused)."""
        folder = self._folder(candidate.rank)
        if folder is not None:
            if folder.names.get(candidate.name) == candidate.ctime_ns:
                del folder.names[candidate.name]
            folder.touched = True
            folder.compact_if_due()

    def park(self, candidate: Candidate) -> None:
        """Leave this job out of ``candidates()`` until its file or hold/ changes, or a forced refresh."""
        folder = self._folder(candidate.rank)
        if folder is not None and folder.names.get(candidate.name) == candidate.ctime_ns:
            del folder.names[candidate.name]
            folder.parked[candidate.name] = candidate.ctime_ns

    def reorder(self, candidate: Candidate, ctime_ns: int) -> None:
        """The file at this name changed: move it to its new place."""
        folder = self._folder(candidate.rank)
        if folder is not None and candidate.name in folder.names:
            folder.names[candidate.name] = ctime_ns
            folder.order.append((ctime_ns, candidate.name))
            folder.sorted = False


class _Seen(Record):
    ctime_ns: int
    not_before: datetime | None = None  # as its newest edit says it, else as its file does
    pin: str | None = None
    uid: int = -1
    file_at: datetime | None = None  # its file's own at:
    edits: tuple = ()  # (path, ctime_ns) of the edits its not_before was read from


class TimedWatch:
    """Not-before times of the queued jobs this host may run, kept current cheaply."""

    def __init__(self, spool: SpoolDir, host: str) -> None:
        self.spool, self.host = spool, host
        self.max_size = spool.config.max_job_size  # an edit is read as the driver reads it
        self.jobs: dict[tuple[int, str], _Seen] = {}
        self.relist()

    def relist(self) -> None:
        """After a drain: it moved files out and back under the same names (a retry, a requeue), which a listing
        that knows a name already does not look at again; after a reload: its folders. Listed afresh; only a file
        whose ctime moved is read."""
        self.index = QueueIndex(self.spool)
        self._listings = -1
        self._edits: dict | None = None  # edit/'s markers as last looked at

    def refresh(self) -> None:
        self.index.refresh()
        edits = self.index.edits.found
        if self.index.listings != self._listings or edits is not self._edits:
            self._listings, self._edits = self.index.listings, edits
            present = set()
            for cand in self.index.candidates():
                key = (cand.rank, cand.name)
                present.add(key)
                if key not in self.jobs or self.jobs[key].ctime_ns != cand.ctime_ns:  # new, or a new file (a retry)
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
