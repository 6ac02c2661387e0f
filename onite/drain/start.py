"""Claiming a picked job and starting it: one rename into running/HOST/, a run record, the executor.

The claim is the rename of the job file from its queue folder into this
host's running/ folder (onite.spool.files.change_state): whoever renames
first owns the job, so two drivers, on one host or several, never start it
twice. The claimed file is checked again where no user can change it, its
run gets an id unique across hosts and drivers, and the executor starts it;
the run record (onite.spool.runrecords) is written before the job can run,
by the local executor's monitor or, for Slurm, by the driver once Slurm has
the job.

Three ways a start can fail, three answers: the job cannot start (its
directory is gone: it is filed as failed); nothing can be recorded (a full
disk: it goes back to its queue and nothing more starts tonight); the
executor takes no job now (the Slurm controller does not answer: it goes
back to its queue and starts pause, PAUSE_FIRST doubling to PAUSE_MAX).
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from onite.drain.finish import queued_ns
from onite.core.errors import JobFormatError, NotFound, OniteError
from onite.core.job import Job
from onite.core.resources import Need
from onite.core.names import make_run_id
from onite.core.state import JobState, Outcome
from onite.exec.runner import NoRecord, Run, SpawnError, Unavailable
from onite.spool import runrecords
from onite.spool.files import change_state, remove_file
from onite.spool.filecheck import BadFile
from onite.spool.index import Candidate

if TYPE_CHECKING:
    from onite.drain.driver import Driver

PAUSE_FIRST, PAUSE_MAX = 15.0, 300.0  # seconds to start nothing after the executor could not take a job


class Starter:
    """Claims and starts the jobs a driver picks; logs their starts in claim order."""

    def __init__(self, driver: Driver) -> None:
        self.d = driver
        self._seq = 0
        self._paused_until: float | None = None  # on the driver's monotonic clock: start nothing before
        self._pause = 0.0
        self._unlogged: list[Run] = []  # runs started here, in claim order, whose start is not logged yet

    @property
    def paused(self) -> bool:
        """Is the executor's pause still on? (Then the driver waits it out: those jobs are tonight's.)"""
        return self._paused_until is not None

    def may_start(self) -> bool:
        """False while the executor's pause lasts (the driver is told to wake when it ends)."""
        if self._paused_until is None:
            return True
        left = self._paused_until - self.d.clock.monotonic()
        if left > 0:
            self.d.note_wake(self.d.clock.now() + timedelta(seconds=left))
            return False
        self._paused_until = None
        return True

    def _new_run_id(self, now: datetime) -> str:
        self._seq += 1
        return make_run_id(now, self.d.host, self.d.pid, self._seq)

    def start(self, cand: Candidate, st_seen: os.stat_result, need: Need, timeout: timedelta | None) -> None:
        """Claim ``cand`` (judged by ``st_seen``, admitted asking ``need`` with time limit ``timeout``: a
        pick, onite.drain.pick.Picked) and start it; a failure is filed, refused or put back."""
        d, picker = self.d, self.d.picker
        target = d.running_dir / cand.name
        try:
            change_state(cand.name, JobState.QUEUED, JobState.RUNNING, cand.path, target, "claiming")
        except NotFound:
            picker.forget(cand)  # another host, or a cancel, got there first: not an error
            return
        d.index.forget(cand)
        picker.meta.pop(cand.name, None)  # its parse, if kept, is taken by claimed_job
        now = d.clock.now()
        try:
            job, st = picker.claimed_job(cand.name, target, st_seen)
        except (JobFormatError, BadFile, OSError) as err:
            d.finisher.move_aside(target, cand.name, st_seen, str(err))
            return
        problem = picker.file_problem(st, may_settle=False)  # claimed: no submit links it any more
        if problem:
            d.finisher.move_aside(target, cand.name, st, problem)
            return
        owner = picker.resolve(st.st_uid)
        job = self._as_admitted(cand.name, job, need, timeout)
        run = Run(name=cand.name, job=job, owner=owner, rank=cand.rank, run_id=self._new_run_id(now),
                  started=now, started_mono=d.clock.monotonic(), spool=str(d.spool.root))
        run.queued_at = datetime.fromtimestamp(cand.ctime_ns / 1e9).astimezone()
        run.need = need  # what it was admitted with: its limits and its room, not a second reading of its file
        run.backfilled, picker.backfilled = picker.backfilled, False
        if job.extra:  # a newer onite's keys, or a hand-written file's: ignored, never refused
            from onite.core.safetext import printable

            d.log.event("warning", cand.name, note="header keys this onite does not know are ignored",
                        keys=printable(",".join(sorted({key[:40] for key, _ in job.extra}))[:200]))
        record = (d.spool.run_record_path(d.host, run.name), self._first_line(run))
        try:
            d.runner.start(run, d.spool.output_path(cand.name), append=job.attempt > 1,
                           stderr_path=d.spool.stderr_path(cand.name), record=record)
        except NoRecord as err:
            d.finisher.put_back_unstarted(run, target, str(err))
            return
        except Unavailable as err:
            self.pause_starts(run, target, str(err))
            return
        except SpawnError as err:
            d.log.event("start-failed", cand.name, user=owner.name, reason=str(err))
            d.finisher.record(run, Outcome(reason=str(err), never_started=True), d.clock.now())
            return
        self._pause = 0.0
        d.running[cand.name] = run
        if not d.runner.writes_record:  # its record holds the executor's id of the job (Slurm's)
            self._write_record(run, record[0], {**record[1], "external_id": run.external_id, **d.runner.runinfo(run)})
            self.log_start(run)
        else:
            self._unlogged.append(run)  # its start is logged when its monitor says it started
        return

    def _as_admitted(self, name: str, job: Job, need: Need, timeout: timedelta | None) -> Job:
        """The claimed job, held to the request and time limit it was admitted with: its owner may have
        rewritten its file since the pick (they own it), and a larger request would overfill the host,
        a longer time limit delay the job backfill promised not to."""
        if (job.mem or 0, job.cpus or 0, job.timeout) == (need.mem, need.cpus, timeout):
            return job
        self.d.log.event("warning", name, note="its file changed after it was admitted: it runs with the request "
                         "and time limit it was admitted with")
        return replace(job, mem=need.mem or None, cpus=need.cpus or None, timeout=timeout)

    def _first_line(self, run: Run) -> dict:
        """What the driver says of a run in the first line of its record (onite.core.runrecord)."""
        d = self.d
        return {"run_id": run.run_id, "name": run.name, "rank": run.rank, "attempt": run.attempt,
                "started": run.started.isoformat(), "queued": run.queued_at.isoformat() if run.queued_at else None,
                "executor": d.runner.executor, "driver_pid": d.pid, "machine": d.machine,
                "mem": run.need.mem if run.need else 0, "cpus": run.need.cpus if run.need else 0}

    def _write_record(self, run: Run, path: str, info: dict) -> None:
        """The run record of a run whose executor does not write it (Slurm): after its start."""
        try:
            os.close(runrecords.create(path, info))
        except runrecords.RecordError as err:
            self.d.log.event("warning", run.name, error=str(err))

    def log_starts(self, *, until: Run | None) -> None:
        """Log the starts of the runs whose monitors said so, in the order the runs were claimed: two
        slots filled at once start in that order in the log, whichever monitor spoke first. ``until``:
        a run that has ended: its start is logged now (if it started), with those of the runs claimed
        before it that have started; the others wait for their monitors."""
        if until is None:
            while self._unlogged and self._unlogged[0].announced:
                self.log_start(self._unlogged.pop(0))
            return
        if until not in self._unlogged:
            return
        index = self._unlogged.index(until)
        for run in [r for r in self._unlogged[: index + 1] if r.announced]:
            self.log_start(run)
        self._unlogged = [r for r in self._unlogged[:index] if not r.announced] + self._unlogged[index + 1:]

    def log_start(self, run: Run) -> None:
        """The ``start`` line. Its ``run`` (the run id, whose last part counts this driver's claims)
        gives the claim order: a start is logged when its monitor says the job runs, and a job claimed
        later may get there first and even end first."""
        self.d.log.event("start", run.name, user=run.owner.name, priority="urgent" if run.rank == 0 else run.rank,
                         attempt=run.attempt, pid=run.pgid, slurm=run.external_id, run=run.run_id,
                         backfilled="yes: it cannot delay the job that waits for room" if run.backfilled else None,
                         unenforced=",".join(run.unenforced) or None)

    def pause_starts(self, run: Run, claimed: Path, err: str) -> None:
        """The executor cannot take jobs now: put this one back in its queue (it keeps its attempt
        count, but goes behind the jobs of its priority) and start nothing for a while, longer
        each time in a row (PAUSE_FIRST doubling up to PAUSE_MAX). A job never fails for this."""
        d = self.d
        self._pause = min(max(self._pause * 2, PAUSE_FIRST), PAUSE_MAX)
        self._paused_until = d.clock.monotonic() + self._pause
        try:
            d.finisher.requeue_file(claimed, run.name, run.rank, queued_ns(run))
        except OniteError as move_err:
            d.log.event("start-failed", run.name, user=run.owner.name, reason=err)
            d.finisher.record(run, Outcome(reason=f"{err}; and requeueing it failed: {move_err}", never_started=True),
                              d.clock.now())
            return
        if run.record_path:  # nothing was submitted: the claim is back, its record goes
            remove_file(run.record_path)
        d.counts["requeued"] += 1
        d.log.event("executor-unavailable", run.name, reason=err, retry_in=f"{self._pause:g}s",
                    note="the job is back in its queue; no job starts before then")
