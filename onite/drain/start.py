"""Starting a picked job: its run record, then its claim (one rename into running/HOST/), then the executor.

The run gets an id unique across hosts and drivers, and its record
(onite.spool.runrecords) is written first, in running/HOST/, where only root
writes: so a claim never exists without its record, and a claim found
without one (or with one that cannot be read) is damage, which recovery
treats as such (onite.drain.recovery). The claim is the rename of the job
file from its queue folder into running/HOST/ (onite.spool.files.change_state):
whoever renames first owns the job, so two drivers, on one host or several,
never start it twice; a claim that fails takes its record with it. The
claimed file is checked again where no user can change it, and the executor
starts it.

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

from onite.core.errors import JobFormatError, NotFound
from onite.core.job import Job
from onite.core.names import make_run_id
from onite.core.state import JobState, Outcome
from onite.drain.finish import Finisher
from onite.drain.night import Night
from onite.drain.pick import Picked
from onite.exec.runner import NoRecord, Run, SpawnError, Unavailable
from onite.spool import runrecords
from onite.spool.filecheck import BadFile
from onite.spool.files import change_state, remove_file


class Starter:
    """Claims and starts the jobs the picker chose."""

    def __init__(self, night: Night, finisher: Finisher) -> None:
        self.night = night
        self.finisher = finisher
        self._seq = 0

    def may_start(self) -> bool:
        """False while the executor's pause lasts (the driver is told to wake when it ends)."""
        night = self.night
        if night.paused_until is None:
            return True
        left = night.paused_until - night.clock.monotonic()
        if left > 0:
            night.note_wake(night.clock.now() + timedelta(seconds=left))
            return False
        night.paused_until = None
        return True

    def _new_run_id(self, now: datetime) -> str:
        self._seq += 1
        return make_run_id(now, self.night.host, self.night.pid, self._seq)

    def start(self, picked: Picked) -> None:
        """Record, claim and start the job ``picked`` (judged by the stat it holds, admitted with its
        request and time limit); a failure is filed, refused or put back."""
        cand, st_seen = picked.cand, picked.st
        night, finisher = self.night, self.finisher
        job = night.jobs.parsed.get(cand.name, (None, None))[1]
        if job is None:  # only the few jobs at the head are kept parsed
            try:
                job, _ = night.jobs.read(cand.path)
            except (JobFormatError, BadFile, OSError):
                night.jobs.forget(cand.name)  # the next pick looks at it again, and refuses it if it must
                return
        now = night.clock.now()
        run = Run(name=cand.name, job=self._as_admitted(cand.name, job, picked, log=False),
                  owner=night.jobs.owner(st_seen.st_uid), rank=cand.rank, run_id=self._new_run_id(now), started=now,
                  started_mono=night.clock.monotonic(), spool=str(night.spool.root), need=picked.need,
                  backfilled=picked.backfilled, queued_at=datetime.fromtimestamp(cand.ctime_ns / 1e9).astimezone(),
                  record_path=night.spool.run_record_path(night.host, cand.name))
        try:
            record_fd = runrecords.create(run.record_path, {**self._first_line(run), **night.runner.record_info(run)})
        except runrecords.RecordError as err:  # nothing is claimed: the job stays queued
            finisher.note_cannot_record(str(err), cand.name)
            return
        try:
            if self._claim(picked, run, job):
                self._hand_over(run, record_fd)
        finally:
            os.close(record_fd)

    def _claim(self, picked: Picked, run: Run, picked_job: Job) -> bool:
        """Claim ``run``'s job (its record is written; ``picked_job``: the job as the pick read it); False
        if it is not ours to start (taken, refused)."""
        night, finisher, cand = self.night, self.finisher, picked.cand
        target = night.running_dir / cand.name
        try:
            change_state(cand.name, JobState.QUEUED, JobState.RUNNING, cand.path, target, "claiming")
        except NotFound:
            remove_file(run.record_path)
            night.forget(cand)  # another host, or a cancel, got there first: not an error
            return False
        night.index.forget(cand)
        try:
            job, st = night.jobs.claimed(cand.name, target, picked.st)
            problem = night.jobs.problem(st, may_settle=False)  # claimed: no submit links it any more
        except (JobFormatError, BadFile, OSError) as err:
            st, problem = picked.st, str(err)
        if problem:
            finisher.move_aside(target, cand.name, st, problem)
            remove_file(run.record_path)
            return False
        if job is not picked_job:  # its owner rewrote it since the pick: it runs as it is now, but for its limits
            run.job = self._as_admitted(cand.name, job, picked, log=True)
        if job.extra:  # a newer onite's keys, or a hand-written file's: ignored, never refused
            from onite.core.safetext import printable

            night.log.event("warning", cand.name, note="header keys this onite does not know are ignored",
                            keys=printable(",".join(sorted({key[:40] for key, _ in job.extra}))[:200]))
        return True

    def _hand_over(self, run: Run, record_fd: int) -> None:
        """Have the executor start the claimed ``run``."""
        night, finisher = self.night, self.finisher
        target = night.running_dir / run.name
        try:
            night.runner.start(run, night.spool.output_path(run.name), append=run.job.attempt > 1,
                               stderr_path=night.spool.stderr_path(run.name), record_fd=record_fd)
        except NoRecord as err:
            finisher.put_back_unstarted(run, target, str(err))
            return
        except Unavailable as err:
            finisher.pause_starts(run, target, str(err))
            return
        except SpawnError as err:
            night.log.event("start-failed", run.name, user=run.owner.name, reason=str(err))
            finisher.record(run, Outcome(reason=str(err), never_started=True), night.clock.now())
            return
        night.pause = 0.0
        night.running[run.name] = run
        night.starts.claimed(run)  # its start is logged when its runner says it started

    def _as_admitted(self, name: str, job: Job, picked: Picked, *, log: bool) -> Job:
        """The job, held to the request and time limit it was admitted with: its owner may have
        rewritten its file since the pick (they own it), and a larger request would overfill the host,
        a longer time limit delay the job backfill promised not to."""
        need, timeout = picked.need, picked.timeout
        if (job.mem or 0, job.cpus or 0, job.timeout) == (need.mem, need.cpus, timeout):
            return job
        if log:
            self.night.log.event("warning", name, note="its file changed after it was admitted: it runs with the "
                                 "request and time limit it was admitted with")
        return replace(job, mem=need.mem or None, cpus=need.cpus or None, timeout=timeout)

    def _first_line(self, run: Run) -> dict:
        """What the driver says of a run in the first line of its record (onite.core.runrecord)."""
        night = self.night
        return {"run_id": run.run_id, "name": run.name, "uid": run.owner.uid, "user": run.owner.name,
                "rank": run.rank, "attempt": run.attempt,
                "started": run.started.isoformat(), "queued": run.queued_at.isoformat() if run.queued_at else None,
                "executor": night.runner.executor, "driver_pid": night.pid, "machine": night.machine,
                "mem": run.need.mem if run.need else 0, "cpus": run.need.cpus if run.need else 0}
