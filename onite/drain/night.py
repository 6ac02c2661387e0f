"""What the steps of one drain share: the Night.

The driver's loop (onite.drain.driver) calls its steps in order, pick,
start, finish, cancels, recovery, and each takes the Night: the spool and
its settings, this host, the clock, the log, the queue as the driver sees
it (onite.spool.index), the runner and the runs it started, and what the
night has done and decided so far (counts, a stop asked for, a window
closed, a record that cannot be written, a pause of the executor, the
next time worth waking for). A step changes only what it is for; no step
holds another.

Two facts several steps read of a queued job are kept here, read once:
its file, per version of it (``JobFiles``), and its owner's account, for
a second. Starts are logged in the order jobs were claimed (``StartLog``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from onite.core.clock import Clock
from onite.core.config import Config
from onite.core.errors import Refused
from onite.core.job import Job
from onite.core.queue import Meta
from onite.core.identity import Identity
from onite.exec.identity import resolve
from onite.exec.notify import Notifier
from onite.exec.runner import Run, Runner
from onite.spool.filecheck import Settling, file_problem, read_job_file
from onite.spool.index import Candidate, QueueIndex
from onite.spool.log import ActivityLog
from onite.spool.paths import SpoolDir

IDENTITY_TTL = 1.0  # seconds an owner's account, as read from the system, is trusted
PARSED_KEPT = 64  # full jobs kept parsed: only the few near the head of the queue


class JobFiles:
    """Queued job files as the driver read them: the fields eligibility needs (``meta``) for every job
    that came up for a decision, the whole job for the few near the head (``parsed``), each kept per
    version of its file (inode, ctime, size); and owners' accounts, each read at most once a second
    (a job needs its owner's three times: checking its file, checking its claim, starting it)."""

    def __init__(self, max_size: int, clock: Clock) -> None:
        self.max_size = max_size
        self.clock = clock
        self.meta: dict[str, tuple[tuple[int, int, int], Meta]] = {}
        self.parsed: dict[str, tuple[tuple[int, int, int], Job]] = {}
        self._owners: dict[int, tuple[float, Identity | Refused]] = {}

    def read(self, path: Path) -> tuple[Job, os.stat_result]:
        """The job file at ``path``, read as onite.spool.filecheck reads one (no link followed, bounded).

        Raises:
            BadFile, JobFormatError, OSError: as read_job_file.
        """
        return read_job_file(path, self.max_size)

    def problem(self, st: os.stat_result, *, may_settle: bool = True) -> str | Settling:
        """Why a queued file must never run, SETTLING, or "" if it may (docs/security.md)."""
        # the ctime it is judged by is the kernel's: compared with the kernel's clock
        return file_problem(st, max_size=self.max_size, now_ns=time.time_ns(), resolve_uid=self.owner,
                            may_settle=may_settle)

    def keep(self, name: str, key: tuple[int, int, int], job: Job) -> Meta:
        """Keep what was read of ``name``'s file (version ``key``); the fields eligibility needs."""
        meta = Meta(after=job.after, not_before=job.not_before, pin=job.pin, retrying=job.attempt > 1,
                    mem=job.mem, cpus=job.cpus, timeout=job.timeout)
        self.meta[name] = (key, meta)
        self.parsed[name] = (key, job)
        if len(self.parsed) > PARSED_KEPT:
            self.parsed.pop(next(iter(self.parsed)))
        return meta

    def known(self, name: str, key: tuple[int, int, int]) -> Meta | None:
        cached = self.meta.get(name)
        return cached[1] if cached and cached[0] == key else None

    def claimed(self, name: str, path: Path, st_seen: os.stat_result) -> tuple[Job, os.stat_result]:
        """The job of a file just claimed: its parse kept from the pick if the file is the one judged, else read.

        Raises:
            BadFile, JobFormatError, OSError: as read_job_file.
        """
        self.meta.pop(name, None)
        cached = self.parsed.pop(name, None)
        st = os.lstat(path)  # a symlink or anything but a regular file is refused by file_problem
        if cached and cached[0][0] == st.st_ino and cached[0][2] == st.st_size and st.st_ino == st_seen.st_ino \
                and st.st_mtime_ns == st_seen.st_mtime_ns:
            return cached[1], st
        return self.read(path)

    def job_of(self, name: str, path: Path) -> Job | None:
        """The job of a queued file, if it can be read (kept parsed or read now)."""
        job = self.parsed.get(name, (None, None))[1]
        if job is None:
            try:
                job, _ = self.read(path)
            except Exception:  # noqa: BLE001 - what cannot be read is said by the caller's reason
                return None
        return job

    def forget(self, name: str) -> None:
        self.meta.pop(name, None)
        self.parsed.pop(name, None)

    def owner(self, uid: int) -> Identity:
        """The account of ``uid`` (onite.exec.identity.resolve), remembered for IDENTITY_TTL seconds.

        Raises:
            Refused: no such account.
        """
        now = self.clock.monotonic()
        known = self._owners.get(uid)
        if known is None or now - known[0] > IDENTITY_TTL:
            try:
                known = (now, resolve(uid))
            except Refused as err:
                known = (now, err)
            self._owners[uid] = known
        if isinstance(known[1], Refused):
            raise known[1]
        return known[1]


class StartLog:
    """Logs the ``start`` of each run once its runner says it started, in the order the runs were claimed:
    two slots filled at once start in that order in the log, whichever monitor spoke first, and a run's
    start is always logged before its end."""

    def __init__(self, log: ActivityLog) -> None:
        self.log = log
        self._unlogged: list[Run] = []  # runs claimed, in order, whose start is not logged yet

    def claimed(self, run: Run) -> None:
        self._unlogged.append(run)

    def flush(self, *, until: Run | None = None) -> None:
        """Log the starts said so far, in claim order. ``until``: a run that has ended: its start is
        logged now (if it started), with those of the runs claimed before it that have started."""
        if until is None:
            while self._unlogged and self._unlogged[0].announced:
                self.write(self._unlogged.pop(0))
            return
        if until not in self._unlogged:
            return
        index = self._unlogged.index(until)
        for run in [r for r in self._unlogged[: index + 1] if r.announced]:
            self.write(run)
        self._unlogged = [r for r in self._unlogged[:index] if not r.announced] + self._unlogged[index + 1:]

    def write(self, run: Run) -> None:
        """The ``start`` line. Its ``run`` (the run id, whose last part counts this driver's claims)
        gives the claim order."""
        self.log.event("start", run.name, user=run.owner.name, priority="urgent" if run.rank == 0 else run.rank,
                       attempt=run.attempt, pid=run.pgid, slurm=run.external_id, run=run.run_id,
                       backfilled="yes: it cannot delay the job that waits for room" if run.backfilled else None,
                       unenforced=",".join(run.unenforced) or None)


@dataclass(eq=False)
class Night:
    """The state of one drain, as its steps share it."""

    spool: SpoolDir
    config: Config
    host: str
    clock: Clock
    log: ActivityLog
    notifier: Notifier
    runner: Runner | None  # set by the driver once it holds its lock (a local runner needs it)
    slots: int
    window_end: datetime | None  # no job starts at or after it (``until``)
    only_timed: bool = False  # start only jobs whose not-before time has come (the daemon's timed wakes)
    index: QueueIndex = field(init=False)
    jobs: JobFiles = field(init=False)
    starts: StartLog = field(init=False)
    running: dict[str, Run] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("done", "failed", "cancelled", "retried", "requeued"), 0))
    stopping: bool = False  # INT or TERM: finish what runs, start nothing
    hard_stop: bool = False  # a second INT or TERM, or QUIT: kill what runs, requeue it
    window_closed: bool = False
    cannot_record: str | None = None  # why nothing more may start: its records cannot be written
    wake_at: datetime | None = None  # the earliest not-before time worth waking for tonight
    paused_until: float | None = None  # the executor took no job: start nothing before (monotonic)
    pause: float = 0.0  # seconds of that pause, doubled each time in a row (onite.drain.finish)
    pid: int = field(default_factory=os.getpid)
    machine: str = field(default_factory=lambda: os.uname().nodename)
    euid: int = field(default_factory=os.geteuid)

    def __post_init__(self) -> None:
        self.index = QueueIndex(self.spool.queue_folders(), hold_dir=self.spool.hold_dir)  # paced by the real clock: it bounds cost, decides nothing
        self.jobs = JobFiles(self.config.max_job_size, self.clock)
        self.starts = StartLog(self.log)

    @property
    def running_dir(self) -> Path:
        return self.spool.running_dir(self.host)

    def forget(self, cand: Candidate) -> None:
        """A queued job left its folder (claimed, failed, refused, gone): drop all that is kept of it."""
        self.index.forget(cand)
        self.jobs.forget(cand.name)

    def may_start(self) -> bool:
        """Neither a stop nor a record that cannot be written keeps jobs from starting."""
        return not (self.stopping or self.hard_stop or self.cannot_record)

    def note_wake(self, when: datetime) -> None:
        """Something may become startable at ``when`` (a not-before time, a settling file): wake then,
        if it is tonight."""
        if self.window_end is not None and when >= self.window_end:
            return  # not tonight
        if self.wake_at is None or when < self.wake_at:
            self.wake_at = when
