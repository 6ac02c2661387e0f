"""Starting a picked job: its run record, then its claim (one rename into running/HOST/), then the executor.

The record comes first, where only root writes, so a claim never exists without one. Whoever renames
first owns the job; a claim that fails takes its record with it; the claimed file is checked again.
"""

from __future__ import annotations

import os
from datetime import datetime

from onite.core.errors import JobFormatError, NotFound, OniteError
from onite.core.job import Job
from onite.core.names import make_run_id
from onite.core.safetext import printable
from onite.core.state import JobState, Outcome
from onite.drain.finish import Finisher
from onite.drain.night import Night
from onite.drain.pick import Picked
from onite.exec.runner import NoRecord, Run, SpawnError, Unavailable
from onite.spool import runrecords
from onite.spool.filecheck import BadFile, read_job_file
from onite.core.jobfile import encode
from onite.spool.edits import take, trusted
from onite.spool.files import change_state, remove_file, replace_file
from onite.spool.scan import read_markers


class Starter:
    """Claims and starts the jobs the picker chose."""

    def __init__(self, night: Night, finisher: Finisher) -> None:
        self.night = night
        self.finisher = finisher
        self._seq = 0

    def start(self, picked: Picked) -> None:
        """Record, claim and start ``picked``, held to what it was admitted with; a failure is filed,
        refused or put back."""
        cand, night = picked.cand, self.night
        try:
            job, _ = read_job_file(cand.path, night.jobs.max_size)
        except (JobFormatError, BadFile, OSError):
            night.jobs.meta.pop(cand.name, None)  # the next pick looks at it again, and refuses it if it must
            return
        now = night.clock.now()
        self._seq += 1
        run = Run(name=cand.name, job=self._as_admitted(cand.name, job, picked, log=False),
                  owner=night.jobs.owner(picked.st.st_uid).in_group(picked.st.st_gid), rank=cand.rank,
                  run_id=make_run_id(now, night.host, night.pid, self._seq), started=now,
                  started_mono=night.clock.monotonic(), spool=str(night.spool.root), need=picked.need,
                  backfilled=picked.backfilled, queued_at=datetime.fromtimestamp(cand.ctime_ns / 1e9).astimezone(),
                  record_path=night.spool.run_record_path(night.host, cand.name))
        first = {"run_id": run.run_id, "name": run.name, "uid": run.owner.uid, "user": run.owner.name,
                 "rank": run.rank, "attempt": run.attempt, "started": run.started.isoformat(),
                 "queued": run.queued_at.isoformat(), "executor": night.runner.executor, "driver_pid": night.pid,
                 "machine": night.machine, "mem": run.need.mem, "cpus": run.need.cpus}
        try:
            record_fd = runrecords.create(run.record_path, {**first, **night.runner.record_info(run)})
        except runrecords.RecordError as err:  # nothing is claimed: the job stays queued
            self.finisher.note_cannot_record(str(err), cand.name)
            return
        try:
            if self._claim(picked, run):
                self._hand_over(run, record_fd)
        finally:
            os.close(record_fd)

    def _claim(self, picked: Picked, run: Run) -> bool:
        """Claim ``run``'s job (its record is written); False if it is not ours to start (taken, refused)."""
        night, cand = self.night, picked.cand
        target = night.running_dir / cand.name
        try:
            change_state(cand.name, JobState.QUEUED, JobState.RUNNING, cand.path, target, "claiming")
        except NotFound:
            remove_file(run.record_path)
            night.forget(cand)  # another host, or a cancel, got there first: not an error
            return False
        night.forget(cand)
        try:
            job, st = read_job_file(target, night.jobs.max_size)
            problem = night.jobs.problem(st, may_settle=False)  # claimed: no submit links it any more
        except (JobFormatError, BadFile, OSError) as err:
            st, problem = picked.st, str(err)
        if problem:
            self.finisher.move_aside(target, cand.name, st, problem)
            remove_file(run.record_path)
            return False
        # a hold made since the pick: `onite hold` looked after making it, found the job queued and said
        # "held", so it must not start (as with an edit, one of the two sees the other)
        held = night.index.held_now(cand.name, st.st_uid)
        if held:
            night.log.event("requeued", cand.name, reason="held as it was claimed")
        job = None if held else self._take_edits(cand.name, job, st, picked, target)
        if job is None:
            try:
                self.finisher.requeue_file(target, cand.name, cand.rank)
            except OniteError as err:  # the claim stays: recovery puts it back
                night.log.event("warning", cand.name, note=f"putting a job back failed: {err}")
                return False
            remove_file(run.record_path)
            return False
        run.job = self._as_admitted(cand.name, job, picked, log=True)  # as its owner may have rewritten it
        if job.extra:  # a newer onite's keys, or a hand-written file's: ignored, never refused
            night.log.event("warning", cand.name, note="header keys this onite does not know are ignored",
                            keys=printable(",".join(sorted({key[:40] for key, _ in job.extra}))[:200]))
        return True

    def _take_edits(self, name: str, job: Job, st: os.stat_result, picked: Picked, target) -> Job | None:
        """The claimed job with its edits (onite.spool.edits) taken and written into the claimed file; None
        if one came after the pick and changes what the pick went by (request, time limit, not-before time,
        dependencies): the job goes back in its queue, edited, for the next pick to judge."""
        night = self.night
        edits = trusted(read_markers(night.spool.edit_dir), name)
        if not edits:
            return job
        kept = night.spool.taken_edit_path(night.host, name)  # until the claimed file holds it
        new, took = take(edits, job, night.jobs.max_size, kept)
        if took and new != job:
            replace_file(target, encode(new), mode=0o600, owner=(st.st_uid, st.st_gid), durable=True)
        remove_file(kept)
        if not took or new == job:
            return job
        meta = picked.meta
        if ((new.after, new.not_before, new.timeout) != (meta.after, meta.not_before, meta.timeout)
                or (new.mem or 0, new.cpus or 0) != (picked.need.mem, picked.need.cpus)):
            night.log.event("requeued", name, reason="edited as it was claimed: its next pick judges it as edited")
            return None
        return new

    def _hand_over(self, run: Run, record_fd: int) -> None:
        night, finisher = self.night, self.finisher
        try:
            night.runner.start(run, night.spool.output_path(run.name), append=run.job.attempt > 1,
                               stderr_path=night.spool.stderr_path(run.name), record_fd=record_fd)
        except NoRecord as err:
            finisher.put_back_unstarted(run, str(err))
        except Unavailable as err:
            finisher.pause_starts(run, str(err))
        except SpawnError as err:
            night.log.event("start-failed", run.name, user=run.owner.name, reason=str(err))
            finisher.record(run, Outcome(reason=str(err), never_started=True), night.clock.now())
        else:
            night.pause = 0.0
            night.running[run.name] = run
            night.starts.claimed(run)  # its start is logged when its runner says it started

    def _as_admitted(self, name: str, job: Job, picked: Picked, *, log: bool) -> Job:
        """The job, held to the request and time limit it was admitted with: its owner may rewrite its file
        after the pick, to overfill the host or delay the job backfill promised not to."""
        need, timeout = picked.need, picked.meta.timeout
        if (job.mem or 0, job.cpus or 0, job.timeout) == (need.mem, need.cpus, timeout):
            return job
        if log:
            self.night.log.event("warning", name, note="its file changed after it was admitted: it runs with the "
                                 "request and time limit it was admitted with")
        return job._replace(mem=need.mem or None, cpus=need.cpus or None, timeout=timeout)
