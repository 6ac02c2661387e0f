"""The driver's in-memory view of the queue, so that picking a job costs the same at
100,000 queued jobs as at 100.

Each queue folder is listed again only when its mtime says its entries
changed: at once when someone else added or removed a file (a big folder,
whose listing is costly, at most every ``fresh_every`` seconds), and at
most every ``rescan_every`` seconds, or every RESCAN_COST_SHARE times as
long as its last listing took if that is longer, when the driver's own
claims are what changed it (a claim from a folder of 100,000 files must
not cost a listing of 100,000 names). A file that enters a folder gets a
new ctime, so it sorts after every job already there: noticing it late
never changes which job runs next while earlier ones wait. A file added
within one clock tick of a listing may leave the mtime unchanged, so such
a listing is marked racy and repeated. Before a driver decides there is
nothing left to do it lists every folder again (``refresh(force=True)``):
no job is ever missed, at worst noticed a second late.

A job the driver cannot start for a reason that lasts (held, pinned to
another host, another user's under a non-root driver) is *parked*: left out
of the order until its file's ctime changes, which the next listing of its
folder sees, until the hold/ folder changes (a hold or release adds or
removes a marker there and leaves the job file, and so its place, alone:
every parked job is looked at again), or until a forced refresh. Ten
thousand held jobs then cost nothing per pick.

The hold markers (``holds``, a ``HoldIndex``) are listed again only when
hold/'s mtime changes (or a listing was racy, as for queue folders), so
asking whether a job is held costs a dict lookup.

Only names and kernel ctimes are kept for every queued job; the few
fields of a job file that eligibility needs are read lazily, once per file
version (inode and ctime), and only for jobs that come up for a decision.

An entry whose name is not a job name (onite.core.names: a newline, an escape
sequence, bytes that are not UTF-8, ``;$()``) is never a job: it never
enters the order, and the listing that finds it hands it out once through
``strays()``, for the driver to move aside. Dot-names are writes in progress
and are skipped.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from onite.core.names import NAME_PATTERN
from onite.spool.holds import held_by, read_holds

RACY_NS = 20_000_000  # a listing this close to the folder's mtime may have missed a same-tick add
# A folder the driver itself changed is listed again at most once per this many times
# its last listing took, so that listing a big queue costs a bounded share of the drain.
RESCAN_COST_SHARE = 20


@dataclass(slots=True)
class Candidate:
    """A queued job as the index last saw it (its file may be gone by the time it is opened)."""

    rank: int
    name: str
    path: Path
    ctime_ns: int


class _Folder:
    __slots__ = ("rank", "path", "names", "order", "head", "gone", "mtime_ns", "scanned_at", "touched", "racy",
                 "sorted", "scan_seconds", "parked", "strays")

    def __init__(self, rank: int, path: Path) -> None:
        self.rank = rank
        self.path = path
        self.names: dict[str, int] = {}  # name → ctime_ns
        self.order: list[tuple[int, str]] = []
        self.head = 0  # order[:head] are gone: where a look for the next job starts
        self.gone: set[str] = set()
        self.mtime_ns = -1
        self.scanned_at = float("-inf")
        self.touched = False
        self.racy = False
        self.sorted = True
        self.scan_seconds = 0.0  # how long its last listing took
        self.parked: dict[str, int] = {}  # name → ctime: out of the order until its file changes (park())
        self.strays: set[str] = set()  # names that are no job names, found by the last listing, not yet handed out


class HoldIndex:
    """The hold markers of SPOOL/hold/ (onite.spool.read_holds), listed again only when the folder changed."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.holds: dict[str, frozenset[int]] = {}
        self.mtime_ns = -1
        self.racy = False

    def refresh(self) -> bool:
        """Look at hold/ again if it changed; True if the markers differ from the last look."""
        if self.path is None:
            return False
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except (FileNotFoundError, NotADirectoryError):
            changed, self.holds, self.mtime_ns = bool(self.holds), {}, -1
            return changed
        if mtime == self.mtime_ns and not self.racy:
            return False
        started_ns = time.time_ns()
        holds = read_holds(self.path)
        self.mtime_ns = mtime
        self.racy = started_ns - mtime < RACY_NS
        changed, self.holds = holds != self.holds, holds
        return changed

    def held(self, name: str, uid: int) -> bool:
        """Does a marker of the job's owner (or root) hold the queued job ``name`` of ``uid``?"""
        return held_by(self.holds, name, uid)


class QueueIndex:
    """Queued jobs in run order, kept current with as few directory listings as possible."""

    def __init__(self, folders: list[tuple[int, Path]], *, rescan_every: float = 1.0,
                 fresh_every: float = 0.05, clock=time.monotonic, hold_dir: Path | None = None) -> None:
        self.rescan_every = rescan_every
        self.fresh_every = fresh_every
        self.clock = clock
        self.folders = [_Folder(rank, path) for rank, path in folders]
        self.listings = 0  # how many directory listings so far (benchmarks report it)
        self.holds = HoldIndex(hold_dir)

    def set_folders(self, folders: list[tuple[int, Path]]) -> None:
        """After a config reload that changed the number of priorities."""
        known = {f.path: f for f in self.folders}
        self.folders = [known.get(path) or _Folder(rank, path) for rank, path in folders]

    # ---- keeping current ------------------------------------------------------

    def refresh(self, *, force: bool = False) -> None:
        now = self.clock()
        if self.holds.refresh():  # a hold or release: every parked job is looked at again
            for folder in self.folders:
                self._unpark(folder)
        for folder in self.folders:
            try:
                mtime = os.stat(folder.path).st_mtime_ns
            except FileNotFoundError:
                folder.names.clear()
                folder.order.clear()
                folder.gone.clear()
                folder.parked.clear()
                folder.strays.clear()
                continue
            changed = mtime != folder.mtime_ns or folder.racy
            if not (changed or force):
                continue
            if force:
                self._unpark(folder)  # before a driver decides there is nothing to do, everything is looked at
                limit = 0.0
            elif folder.touched:
                limit = max(self.rescan_every, RESCAN_COST_SHARE * folder.scan_seconds)
            else:  # someone else's change: at once, unless listing this folder is costly
                limit = min(self.fresh_every, RESCAN_COST_SHARE * folder.scan_seconds)
            if now - folder.scanned_at >= limit:
                self._scan(folder, mtime)

    def _scan(self, folder: _Folder, mtime_ns: int) -> None:
        started_ns = time.time_ns()
        started = time.perf_counter()
        names, order, gone, parked = folder.names, folder.order, folder.gone, folder.parked
        present: set[str] = set()
        still_parked: dict[str, int] = {}
        is_name = NAME_PATTERN.fullmatch
        try:
            with os.scandir(folder.path) as it:
                for entry in it:
                    name = entry.name
                    if name in names:
                        present.add(name)
                        continue
                    if not is_name(name):  # a write in progress (.NAME.tmp), or no job at all
                        if name[0] != ".":
                            folder.strays.add(name)
                        continue
                    try:  # only a new (or parked) name costs a stat (from the listing's own folder handle)
                        ctime_ns = entry.stat(follow_symlinks=False).st_ctime_ns
                    except FileNotFoundError:
                        continue
                    if parked.get(name) == ctime_ns:
                        still_parked[name] = ctime_ns  # unchanged since it was parked: it stays out
                        continue
                    present.add(name)
                    names[name] = ctime_ns
                    order.append((ctime_ns, name))
                    gone.discard(name)
                    folder.sorted = False
        except FileNotFoundError:
            pass
        self.listings += 1
        folder.parked = still_parked
        if len(present) < len(names):  # present holds only names in names: some left
            for name in [n for n in names if n not in present]:
                del names[name]
                gone.add(name)
        folder.mtime_ns = mtime_ns
        folder.scanned_at = self.clock()
        folder.scan_seconds = time.perf_counter() - started
        folder.touched = False
        folder.racy = started_ns - mtime_ns < RACY_NS
        if len(folder.gone) > 64 and len(folder.gone) > len(folder.order) // 2:
            self._compact(folder)

    @staticmethod
    def _compact(folder: _Folder) -> None:
        folder.order = [(c, n) for c, n in folder.order if folder.names.get(n) == c]
        folder.head = 0
        folder.gone.clear()

    # ---- reading --------------------------------------------------------------

    def candidates(self) -> Iterator[Candidate]:
        """Queued jobs in run order (as last seen; a file may be gone by the time you open it)."""
        for folder in self.folders:
            if not folder.sorted:
                folder.order.sort()
                folder.sorted = True
                folder.head = 0
            order, names = folder.order, folder.names
            # Jobs leave a queue from its front: skip what has left once and for all,
            # so that the next look does not walk past every job drained so far.
            head, end = folder.head, len(order)
            while head < end and names.get(order[head][1]) != order[head][0]:
                head += 1
            folder.head = head
            for i in range(head, end):
                ctime_ns, name = order[i]
                if names.get(name) == ctime_ns:
                    yield Candidate(folder.rank, name, folder.path / name, ctime_ns)

    def strays(self) -> list[Candidate]:
        """Entries of the queue folders whose names are no job names, each handed out once per
        listing of its folder that finds it (ctime_ns 0: not looked at). Never jobs: the driver
        moves them aside."""
        found = []
        for folder in self.folders:
            if folder.strays:
                found.extend(Candidate(folder.rank, name, folder.path / name, 0) for name in sorted(folder.strays))
                folder.strays.clear()
        return found

    def namesakes(self, candidate: Candidate) -> list[Candidate]:
        """The other queued jobs called ``candidate.name`` the index knows of, in other folders
        (parked ones too): normally none, since onite submit refuses a name that is queued."""
        found = []
        for folder in self.folders:
            if folder.rank != candidate.rank:
                ctime_ns = folder.names.get(candidate.name, folder.parked.get(candidate.name))
                if ctime_ns is not None:
                    found.append(Candidate(folder.rank, candidate.name, folder.path / candidate.name, ctime_ns))
        return found

    def paths(self, name: str) -> list[str]:
        """Where a job ``name`` is queued, as last seen (normally one folder, or none)."""
        return [f"{folder.path}/{name}" for folder in self.folders if name in folder.names or name in folder.parked]

    def __len__(self) -> int:
        return sum(len(folder.names) + len(folder.parked) for folder in self.folders)

    def counts(self) -> dict[int, int]:
        return {folder.rank: len(folder.names) + len(folder.parked) for folder in self.folders}

    # ---- the driver's own changes ----------------------------------------------

    def forget(self, candidate: Candidate) -> None:
        """The driver moved this job out of its folder (claimed, failed or refused)."""
        for folder in self.folders:
            if folder.rank == candidate.rank:
                if folder.names.get(candidate.name) == candidate.ctime_ns:
                    del folder.names[candidate.name]
                    folder.gone.add(candidate.name)
                folder.touched = True
                if len(folder.gone) > 64 and len(folder.gone) > len(folder.order) // 2:
                    self._compact(folder)
                return

    def park(self, candidate: Candidate) -> None:
        """Leave this job out of ``candidates()`` until its file changes, hold/ changes (a hold or a
        release) or a forced refresh: a held job, or one pinned to another host, then costs nothing
        per pick, however many there are."""
        for folder in self.folders:
            if folder.rank == candidate.rank:
                if folder.names.get(candidate.name) == candidate.ctime_ns:
                    del folder.names[candidate.name]
                    folder.parked[candidate.name] = candidate.ctime_ns
                return

    @staticmethod
    def _unpark(folder: _Folder) -> None:
        for name, ctime_ns in folder.parked.items():
            if name not in folder.names:
                folder.names[name] = ctime_ns
                folder.order.append((ctime_ns, name))
                folder.sorted = False
        folder.parked = {}

    def reorder(self, candidate: Candidate, ctime_ns: int) -> None:
        """The file at this name changed (replaced, or hold/release): move it to its new place."""
        for folder in self.folders:
            if folder.rank == candidate.rank and candidate.name in folder.names:
                folder.names[candidate.name] = ctime_ns
                folder.order.append((ctime_ns, candidate.name))
                folder.sorted = False
                return


def is_settling(st: os.stat_result, now_ns: int) -> bool:
    """A second hard link that is a submit's link-then-unlink in progress, not an attack."""
    return st.st_nlink == 2 and stat.S_ISREG(st.st_mode) and now_ns - st.st_ctime_ns < 2_000_000_000
