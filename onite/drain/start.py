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

from onite.core.errors import JobFormatError, NotFound
from onite.core.job import Job
from onite.core.names import make_run_id
from onite.core.resources import Need
from onite.core.state import JobState, Outcome
from onite.drain.finish import Finisher
from onite.drain.night import Night
from onite.drain.pick import Picked
from onite.exec.runner import NoRecord, Run, SpawnError, Unavailable
from onite.spool import runrecords
from onite.spool.filecheck import BadFile
from onite.spool.files import change_state


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
        """Claim the job ``picked`` (judged by the stat it holds, admitted with its request and time
        limit) and start it; a failure is filed, refused or put back."""
        cand, st_seen, need, timeout = picked.cand, picked.st, picked.need, picked.timeout
        night, finisher = self.night, self.finisher
        target = night.running_dir / cand.name
        try:
            change_state(cand.name, JobState.QUEUED, JobState.RUNNING, cand.path, target, "claiming")
        except NotFound:
            night.forget(cand)  # another host, or a cancel, got there first: not an error
            return
        night.index.forget(cand)
        now = night.clock.now()
        try:
            job, st = night.jobs.claimed(cand.name, target, st_seen)
        except (JobFormatError, BadFile, OSError) as err:
            finisher.move_aside(target, cand.name, st_seen, str(err))
            return
        problem = night.jobs.problem(st, may_settle=False)  # claimed: no submit links it any more
        if problem:
            finisher.move_aside(target, cand.name, st, problem)
            return
        owner = night.jobs.owner(st.st_uid)
        job = self._as_admitted(cand.name, job, need, timeout)
        run = Run(name=cand.name, job=job, owner=owner, rank=cand.rank, run_id=self._new_run_id(now),
                  started=now, started_mono=night.clock.monotonic(), spool=str(night.spool.root))
        run.queued_at = datetime.fromtimestamp(cand.ctime_ns / 1e9).astimezone()
        run.need = need  # what it was admitted with: its limits and its room, not a second reading of its file
        run.backfilled = picked.backfilled
        if job.extra:  # a newer onite's keys, or a hand-written file's: ignored, never refused
            from onite.core.safetext import printable

            night.log.event("warning", cand.name, note="header keys this onite does not know are ignored",
                            keys=printable(",".join(sorted({key[:40] for key, _ in job.extra}))[:200]))
        record = (night.spool.run_record_path(night.host, run.name), self._first_line(run))
        try:
            night.runner.start(run, night.spool.output_path(cand.name), append=job.attempt > 1,
                               stderr_path=night.spool.stderr_path(cand.name), record=record)
        except NoRecord as err:
            finisher.put_back_unstarted(run, target, str(err))
            return
        except Unavailable as err:
            finisher.pause_starts(run, target, str(err))
            return
        except SpawnError as err:
            night.log.event("start-failed", cand.name, user=owner.name, reason=str(err))
            finisher.record(run, Outcome(reason=str(err), never_started=True), night.clock.now())
            return
        night.pause = 0.0
        night.running[cand.name] = run
        if not night.runner.writes_record:  # its record holds the executor's id of the job (Slurm's)
            self._write_record(run, record[0], {**record[1], "external_id": run.external_id, **night.runner.runinfo(run)})
            night.starts.write(run)
        else:
            night.starts.claimed(run)  # its start is logged when its monitor says it started

    def _as_admitted(self, name: str, job: Job, need: Need, timeout: timedelta | None) -> Job:
        """The claimed job, held to the request and time limit it was admitted with: its owner may have
        rewritten its file since the pick (they own it), and a larger request would overfill the host,
        a longer time limit delay the job backfill promised not to."""
        if (job.mem or 0, job.cpus or 0, job.timeout) == (need.mem, need.cpus, timeout):
            return job
        self.night.log.event("warning", name, note="its file changed after it was admitted: it runs with the "
                             "request and time limit it was admitted with")
        return replace(job, mem=need.mem or None, cpus=need.cpus or None, timeout=timeout)

    def _first_line(self, run: Run) -> dict:
        """What the driver says of a run in the first line of its record (onite.core.runrecord)."""
        night = self.night
        return {"run_id": run.run_id, "name": run.name, "rank": run.rank, "attempt": run.attempt,
                "started": run.started.isoformat(), "queued": run.queued_at.isoformat() if run.queued_at else None,
                "executor": night.runner.executor, "driver_pid": night.pid, "machine": night.machine,
                "mem": run.need.mem if run.need else 0, "cpus": run.need.cpus if run.need else 0}

    def _write_record(self, run: Run, path: str, info: dict) -> None:
        """The run record of a run whose executor does not write it (Slurm): after its start."""
        try:
            os.close(runrecords.create(path, info))
        except runrecords.RecordError as err:
            self.night.log.event("warning", run.name, error=str(err))
