"""Recovery: what a dead driver of this host left in running/HOST/, dealt with exactly once.

A driver that starts (holding this host's lock, so no other driver of the
host is alive) looks at every claim left in running/HOST/ and decides from
its run record (onite.core.runrecord; docs/job-control.md, "Exactly once"):

- a record whose result was written before the driver died: finish filing it;
- no record, or no ``monitor`` line: the job never started; put it back;
- ``ended`` or ``failed``: file how it ended, as its monitor recorded it;
- a monitor still alive: adopt the run (watched, limited and cancellable as
  if started here);
- a monitor gone with no end recorded (kill -9, the OOM killer), another
  machine's run, or one from before a reboot: stop what is left of it
  (onite.drain.orphans) and run it again (or fail it, on_interrupt = fail):
  the one case of a rerun;
- a Slurm job: file how it ended if it did (lost, if Slurm forgot it: it is
  never run again), else re-attach it; an older onite's: stop it, run it again.

A claim whose retry is already spooled (a driver killed between writing the
retry and removing the claim) is dropped. One damaged claim never stops the
night: it is logged and left for the next driver.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from onite.drain.finish import queued_ns
from onite.drain.outliving import OutlivingRuns
from onite.core.errors import DamagedRecord, JobFormatError, OniteError, SpoolIOError
from onite.core.job import Job
from onite.core.names import is_valid_name
from onite.core.runrecord import VERSION, RunRecord, admitted_need
from onite.core.state import JobState, Outcome, Result, memory_outcome, outcome_from_status, unrun_result
from onite.exec.contain import boot_id
from onite.exec.runner import Run, Unavailable
from onite.spool import runrecords
from onite.spool.filecheck import BadFile
from onite.spool.files import change_state, remove_file
from onite.spool.log import logged_final
from onite.spool.paths import RUN_RECORD
from onite.spool.queued import find_queued
from onite.spool.results import read_result
from onite.spool.scan import find_running, user_name

if TYPE_CHECKING:
    from onite.drain.driver import Driver


class Recovery(OutlivingRuns):
    """Recovers one host's claims for a driver that holds that host's lock."""

    def __init__(self, driver: Driver, *, may_reattach: bool = True) -> None:
        self.d = driver
        self.may_reattach = may_reattach  # may take back runs that outlived their driver (Slurm)

    def recover(self) -> None:
        """Deal with every claim in running/HOST/ (see the module's docstring)."""
        d = self.d
        d.orphans.sweep_cgroups()
        try:
            names = os.listdir(d.running_dir)
        except FileNotFoundError:
            return
        except OSError as err:
            d.log.event("error", error=str(SpoolIOError(d.running_dir, "listing", err)), note="recovery skipped")
            return
        jobs = [n for n in names if is_valid_name(n)]
        for name in jobs:
            try:
                self._claim(name)
            except Exception as err:  # noqa: BLE001 - one damaged claim must not stop the night
                d.log.event("error", name, error=f"recovering it: {type(err).__name__}: {err}",
                            note="left in running/ for the next driver")
        for name in names:
            if name.endswith(RUN_RECORD) and name[: -len(RUN_RECORD)] not in jobs:
                self._log_if_filed(name[: -len(RUN_RECORD)])
                remove_file(d.running_dir / name)  # a run record whose job is gone
            elif name.startswith(".") and name.endswith(".tmp"):
                remove_file(d.running_dir / name)  # a run record a dead driver was writing (we hold the lock)

    def _claim(self, name: str) -> None:
        d = self.d
        path = d.running_dir / name
        record_path = d.spool.run_record_path(d.host, name)
        rec = runrecords.read(record_path)
        info = rec.info if rec is not None else {}
        if rec is not None and rec.version < VERSION or info.get("executor") == "slurm":
            self._unmonitored(name, path, info)  # an older onite's run, or a Slurm job
            return
        if self._already_filed(name, path, info):
            return
        if rec is None or not rec.started_job:
            # The monitor records itself before it forks the job, and holds the driver lock until
            # then: a claim whose record has no monitor line was never started.
            if rec is None:  # an older onite wrote the record after the start: look for its processes
                what = d.orphans.stop_unrecorded(name)
                rerun = not what.startswith("no run record, and none")
            else:
                what, rerun = "it had not started", False
            self.requeue(name, path, info, what, rerun=rerun)
            return
        if rec.ended:
            if not d.orphans.monitor_alive(rec):  # died after recording the end: its clean-up is ours
                d.orphans.stop_orphans(rec)
            self._file(name, path, rec)
            return
        machine = info.get("machine")
        if machine and machine != d.machine:
            self.requeue(name, path, info, f"it ran on {machine}, which cannot be checked from here; "
                         "how it ended is unknown", rerun=True)
            return
        if info.get("boot") and info.get("boot") != boot_id():
            self.requeue(name, path, info, "the machine restarted while it ran; how it ended is unknown", rerun=True)
            return
        if self._adopt(name, path, rec):
            return
        # its monitor is gone and recorded no end: it was killed (kill -9, the OOM killer)
        rec = runrecords.read(record_path) or rec  # it may have ended just now
        if rec.ended:
            d.orphans.stop_orphans(rec)
            self._file(name, path, rec)
            return
        what = d.orphans.stop_orphans(rec)
        self.requeue(name, path, info, f"its monitor was killed and recorded no end ({what})", rerun=True)

    def _already_filed(self, name: str, path: Path, info: dict) -> bool:
        """The dead driver wrote the result but died before moving the job into jobsdone/: finish that."""
        d = self.d
        try:
            previous = read_result(d.spool, name)
        except DamagedRecord:
            previous = None  # torn as its driver died: recovered as if it had not been written
        if previous is None or not info.get("run_id") or previous.run_id != info.get("run_id"):
            return False
        try:
            change_state(name, JobState.RUNNING, previous.state, path, d.spool.done_dir / name,
                         "completing a finished job")
        except OniteError as err:
            d.log.event("error", name, error=str(err))
            return True
        remove_file(d.spool.run_record_path(d.host, name))
        d.log.event("recovered", name, action="its result was recorded; filed it")
        self._log_result(previous)
        return True

    def _log_if_filed(self, name: str) -> None:
        """A run record whose job is gone: if the job was filed (its result names this run), its
        driver died between filing it and logging how it ended, which the log, and the jobs that
        read their dependency's outcome there (onite.spool.log.Outcomes), must still be told."""
        d = self.d
        rec = runrecords.read(d.spool.run_record_path(d.host, name))
        run_id = rec.info.get("run_id") if rec is not None else None
        try:
            previous = read_result(d.spool, name)
        except OniteError:  # damaged, or unreadable: nothing to tell from it
            return
        if previous is not None and run_id and previous.run_id == run_id \
                and not logged_final(d.spool.log_path, run_id):  # its driver died before it could log it
            self._log_result(previous)

    def _log_result(self, result: Result) -> None:
        """The line a driver logs as it files a job, for one whose driver died before it could."""
        self.d.log.event(str(result.state), result.name, user=result.user, reason=result.reason or None,
                         exit=result.exit_code, attempt=result.attempt, run=result.run_id or None,
                         note="logged by recovery: its driver died as it filed the job")

    def _run_of(self, name: str, path: Path, info: dict) -> Run:
        """The Run of a claim, rebuilt from its job file and its run record.

        Raises:
            OSError, JobFormatError, BadFile, Refused: the job file cannot be read, or its owner has no account.
        """
        d = self.d

        def when(key: str) -> datetime | None:
            try:
                value = datetime.fromisoformat(info[key])
                return value if value.tzinfo else None
            except (KeyError, TypeError, ValueError):
                return None

        try:
            job, st = d.picker.read_job(path)
        except (JobFormatError, BadFile) as err:
            # The claim stays its owner's file, which they may still change (or a disk may damage):
            # what it says now cannot undo a run that started. A run whose record says it started
            # is recovered from that record (only root writes it), never run again for its file.
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or "run_id" not in info:
                raise
            job = _stand_in(name, info, when("queued") or when("started") or d.clock.now(), d.host)
            d.log.event("warning", name, error=f"its job file changed while it ran ({err})",
                        note="recovered from its run record")
        owner = d.picker.resolve(st.st_uid)
        rank = info.get("rank") if isinstance(info.get("rank"), int) else job.priority

        run = Run(name=name, job=job, owner=owner, rank=rank, run_id=str(info.get("run_id") or ""),
                  started=when("started") or d.clock.now(), started_mono=d.clock.monotonic(),
                  spool=str(d.spool.root), record_path=d.spool.run_record_path(d.host, name))
        run.queued_at = when("queued")
        run.need = admitted_need(info)  # it holds what it was admitted with, not what its file says now
        deadline = when("deadline")  # and the time limit it started with: packing's estimate of its end
        if "deadline" in info and (info["deadline"] is None or (deadline is not None and deadline >= run.started)):
            run.job = replace(job, timeout=deadline - run.started if deadline is not None else None)
        return run

    def _adopt(self, name: str, path: Path, rec: RunRecord) -> bool:
        """Take over a run whose monitor is alive: it is watched, limited and cancellable as if started here."""
        d = self.d
        try:
            run = self._run_of(name, path, rec.info)
        except (OSError, OniteError, BadFile):
            return False
        if not d.runner.adopt(run, rec):
            return False
        d.running[name] = run
        d.log.event("recovered", name, action="adopted (still running)", monitor=rec.monitor_pid, pid=rec.job_pid)
        return True

    def _file(self, name: str, path: Path, rec: RunRecord) -> None:
        """File a run that ended while no driver watched it, from what its monitor recorded."""
        d = self.d
        try:
            run = self._run_of(name, path, rec.info)
        except (OSError, OniteError, BadFile) as err:
            self.requeue(name, path, rec.info, f"it ended, but its job file cannot be read ({err})", rerun=False)
            return
        retry = self._retry_of(run)
        if retry:
            self._drop(name, path, run, queued=retry == "queued")
            return
        run.usage = rec.usage
        # as a live driver files it (onite.exec.local): a job the kernel killed for its memory is out of memory
        outcome = (memory_outcome(outcome_from_status(rec.status), rec.usage, run.need) if rec.status is not None
                   else Outcome(reason=rec.failed or "", never_started=rec.failed is not None and rec.job_pid is None))
        ended = None
        if rec.ended_at:
            try:
                ended = datetime.fromisoformat(rec.ended_at)
            except ValueError:
                ended = None
        d.log.event("recovered", name, action="filed how it ended while no driver was running",
                    outcome=outcome.describe() or "exit 0")
        d.finisher.record(run, outcome, ended if ended and ended.tzinfo else d.clock.now())

    def _drop(self, name: str, path: Path, run: Run, *, queued: bool) -> None:
        """A later attempt is already spooled: this claim is stale, and must neither run nor be filed.
        ``queued``: that attempt waits in a queue, and the claim's driver may have died before
        clearing the name for it (onite.drain.finish): another user's file of the name, put in a
        queue while the claim held it, goes aside first, or its earlier ctime would give it the name
        and set the retry aside. (A later attempt that is running or finished holds or held the name
        by itself, and a namesake queued since may be a new job.)"""
        if queued:
            self.d.finisher.clear_namesakes(name, run.owner.uid, since_ns=queued_ns(run), settle=True)
        remove_file(path)
        remove_file(self.d.spool.run_record_path(self.d.host, name))
        self.d.log.event("recovered", name, action="dropped: its retry was already spooled", attempt=run.attempt)

    def _retry_of(self, run: Run) -> str | None:
        """Where a later attempt of this job is already spooled: "queued", "running" (on another host)
        or "finished"; None if there is none. A driver killed between writing a retry and removing
        the claim leaves both."""
        d = self.d

        def later(job: Job | None) -> bool:
            return job is not None and job.submitted == run.job.submitted and job.attempt > run.attempt

        others = [e for e in find_running(d.spool, run.name) if e.host != d.host]
        for entry in find_queued(d.spool, run.name) + others:
            if entry.uid != run.owner.uid:
                continue  # another user's file says nothing of this job, whatever it claims (a namesake)
            try:
                job, _ = d.picker.read_job(entry.path)
            except (OSError, JobFormatError, BadFile):
                continue
            if later(job):
                return "running" if entry.host else "queued"
        try:
            previous = read_result(d.spool, run.name)
        except (DamagedRecord, SpoolIOError):
            return None
        if (previous is not None and previous.uid == run.owner.uid and previous.submitted == run.job.submitted
                and previous.attempt > run.attempt):
            return "finished"
        return None

    def requeue(self, name: str, path: Path, info: dict, what: str, *, rerun: bool) -> None:
        """Put a claim back in its queue (or fail it, with on_interrupt = fail, when it may have run)."""
        d = self.d
        try:
            claimed = self._run_of(name, path, info)
        except (OSError, OniteError, BadFile):
            claimed = None
        retry = self._retry_of(claimed) if claimed is not None else None
        if retry:
            self._drop(name, path, claimed, queued=retry == "queued")
            return
        record_path = d.spool.run_record_path(d.host, name)
        if rerun and d.config.on_interrupt == "fail":
            self._fail(name, path, info, what)
            remove_file(record_path)
            return
        rank = info.get("rank")
        if not isinstance(rank, int):
            try:
                job, _ = d.picker.read_job(path)
                rank = 0 if job.urgent else job.priority
            except (OSError, JobFormatError, BadFile):
                rank = d.config.default_priority
        try:
            owner = os.lstat(path).st_uid
        except OSError:
            owner = None
        if owner is not None and any(e.uid == owner for e in find_queued(d.spool, name)):
            remove_file(path)  # a retry was already queued before the crash (another user's namesake is not)
            action, requeued = "dropped (its retry is already queued)", True
        else:
            try:
                requeued = d.finisher.requeue_file(path, name, int(rank), queued_ns(claimed) if claimed else None)
            except OniteError as err:
                d.log.event("error", name, error=str(err))
                return
            action = ("rerun: requeued" if rerun else "requeued") if requeued else \
                "set aside: another user's job of that name was queued before it"
        remove_file(record_path)
        d.counts["requeued"] += requeued
        d.log.event("recovered", name, action=action, why=what, driver=info.get("driver_pid"))

    def _fail(self, name: str, path: Path, info: dict, what: str) -> None:
        """on_interrupt = fail: file a claim that may have run as failed, with what recovery found."""
        d = self.d
        try:
            job, st = d.picker.read_job(path)
        except (OSError, JobFormatError, BadFile):
            job, st = None, os.lstat(path)
        started = datetime.fromisoformat(info["started"]) if info.get("started") else None
        result = unrun_result(name=name, uid=st.st_uid, user=user_name(st.st_uid), state=JobState.FAILED,
                              reason=f"interrupted: {what}", host=d.host, now=d.clock.now(), job=job,
                              urgent=bool(job and job.urgent), started=started, run_id=info.get("run_id", ""))
        if d.finisher.file_unrun(result, JobState.RUNNING, path, "failing an interrupted job"):
            d.log.event("recovered", name, action="failed (on_interrupt = fail)", processes=what)
            d.notifier.notify(result, job, d.config)


def _stand_in(name: str, info: dict, submitted: datetime, host: str) -> Job:
    """The job of a claim whose file can no longer be read, as its run record tells it: enough to
    watch the run and file how it ended (no retry: the job it would spool again is unknown)."""
    from onite.core.config import MAX_PRIORITIES
    from onite.core.job import MAX_RETRIES

    rank = info.get("rank")
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank <= MAX_PRIORITIES else 1
    attempt = info.get("attempt")
    attempt = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and 1 <= attempt <= MAX_RETRIES + 1 else 1
    return Job(name=name, priority=max(rank, 1), urgent=rank == 0, submitted=submitted, host=host, umask=0o022,
               cwd=b"/", env={}, body=b"", attempt=attempt, retries=attempt - 1)
