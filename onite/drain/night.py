"""What the steps of one drain share: the Night, of which each step changes only what it is for."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from onite.core.clock import Clock
from onite.core.config import Config
from onite.core.errors import Refused
from onite.core.queue import Meta
from onite.core.identity import Identity
from onite.core.state import Outcome, Result
from onite.drain.metrics import Metrics
from onite.exec.identity import resolve
from onite.exec.notify import Notifier
from onite.exec.runner import Run, Runner
from onite.spool.filecheck import Settling, file_problem
from onite.spool.index import Candidate, QueueIndex
from onite.spool.log import ActivityLog
from onite.spool.paths import SpoolDir
from onite.spool.scan import forget_accounts

IDENTITY_TTL = 1.0  # seconds an owner's account, as read from the system, is trusted


class JobFiles:
    """What the driver read of queued job files: the fields eligibility needs (``meta``), per version of
    each file, so that a pick reads no unchanged file again; and owners' accounts, each read at most
    once a second (a pick may judge many files of one owner)."""

    def __init__(self, max_size: int, clock: Clock) -> None:
        self.max_size = max_size
        self.clock = clock
        self.meta: dict[str, tuple[tuple, Meta]] = {}  # by (inode, ctime, size, its edits)
        self._owners: dict[int, tuple[float, Identity | Refused]] = {}

    def problem(self, st: os.stat_result, *, may_settle: bool = True) -> str | Settling:
        """Why a queued file must never run, SETTLING, or "" if it may (docs/security.md)."""
        return file_problem(st, max_size=self.max_size, resolve_uid=self.owner, may_settle=may_settle)

    def owner(self, uid: int) -> Identity:
        """The account of ``uid``, remembered for IDENTITY_TTL seconds. Raises Refused: no such account."""
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
    """Logs the ``start`` of each run once its runner says it started, in claim order, always before
    its end."""

    def __init__(self, log: ActivityLog) -> None:
        self.log = log
        self._unlogged: list[Run] = []  # runs claimed, in order, whose start is not logged yet

    def claimed(self, run: Run) -> None:
        self._unlogged.append(run)

    def flush(self, *, until: Run | None = None) -> None:
        """Log the starts said so far, in claim order. ``until``: a run that ended, whose start (if any)
        is logged now, with those claimed before it that have started."""
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
    slots: int = 0  # set with the runner
    window_end: datetime | None = None  # no job starts at or after it (``until``)
    only_timed: bool = False  # start only jobs whose not-before time has come (the daemon's timed wakes)
    index: QueueIndex = field(init=False)
    jobs: JobFiles = field(init=False)
    starts: StartLog = field(init=False)
    metrics: Metrics = field(init=False)
    running: dict[str, Run] = field(default_factory=dict)
    ended: dict[str, Outcome] = field(default_factory=dict)  # runs that ended, not filed yet (onite.drain.finish)
    used: dict[str, float] = field(default_factory=dict)  # user → seconds their runs that ended this drain ran (order = "fair")
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
        # paced by the real clock: it bounds cost, decides nothing
        self.index = QueueIndex(self.spool)
        self.jobs = JobFiles(self.config.max_job_size, self.clock)
        self.starts = StartLog(self.log)
        forget_accounts()
        self.metrics = Metrics(self.spool, self.host, self.log, self.clock)

    @property
    def running_dir(self) -> Path:
        return self.spool.running_dir(self.host)

    def count(self, result: Result) -> None:
        """A job was filed: count it tonight and in the host's counters."""
        self.counts[str(result.state)] += 1
        self.metrics.filed(result)

    def forget(self, cand: Candidate) -> None:
        """A queued job left its folder (claimed, failed, refused, gone): drop all that is kept of it."""
        self.index.forget(cand)
        self.jobs.meta.pop(cand.name, None)

    def usage(self) -> dict[str, float]:
        """Each user's running time this drain, their running runs' so far included."""
        used = dict(self.used)
        now = self.clock.monotonic()
        for run in self.running.values():
            used[run.owner.name] = used.get(run.owner.name, 0.0) + max(0.0, now - run.started_mono)
        return used

    def note_wake(self, when: datetime) -> None:
        """Something may become startable at ``when``: wake then, if that is tonight."""
        if (self.window_end is None or when < self.window_end) and (self.wake_at is None or when < self.wake_at):
            self.wake_at = when
