"""Recovery: what a dead driver of this host left in running/HOST/, dealt with exactly once.

Holding the host's lock, the driver decides each claim from its run record (docs/job-control.md,
"Exactly once"): an ended run is filed as recorded, one whose monitor lives is adopted, one never
started is requeued, a Slurm job is taken back; one with a damaged record, or whose monitor died
without an end, has what is left of it stopped and runs again (or fails): the one case of a rerun; one
whose monitor died after its job's leader ``exited`` is filed with that status once what is left of it is
stopped. One damaged claim never stops the night. What belongs to a run is told without trusting what a user controls: its cgroups as its record
names them, the process group of a process carrying its ONITE_RUN_ID, its Slurm job.
"""

from __future__ import annotations

import os
import stat
from datetime import datetime
from pathlib import Path

from onite.core.config import MAX_PRIORITIES
from onite.core.errors import DamagedRecord, JobFormatError, OniteError, SpoolIOError
from onite.core.job import MAX_RETRIES, Job
from onite.core.names import is_valid_key, run_id_host
from onite.core.runrecord import RunRecord, admitted_need
from onite.core.state import HARD_STOPPED, JobState, Result, Stop, unrun_result
from onite.core.timeparse import parse_stamp
from onite.core.values import is_whole
from onite.drain.finish import Finisher
from onite.drain.night import Night
from onite.exec import contain, limits
from onite.exec.contain import boot_id
from onite.exec.processes import stop_leftovers
from onite.exec.runner import Run, Runner, Unavailable
from onite.spool import runrecords
from onite.spool.filecheck import BadFile, read_job_file
from onite.spool.files import change_state, remove_file
from onite.spool.log import logged_final
from onite.spool.edits import put_back
from onite.spool.paths import RUN_RECORD, TAKEN_EDIT
from onite.spool.results import read_result
from onite.spool.accounts import user_name
from onite.spool.scan import find_queued, find_running


class Recovery:
    """Recovers one host's claims for a driver that holds that host's lock."""

    def __init__(self, night: Night, finisher: Finisher, containment: contain.Containment, limiter: limits.Limiter,
                 make_runner) -> None:
        self.night = night
        self.finisher = finisher
        self.containment = containment
        self.limiter = limiter
        self.make_runner = make_runner  # an executor of another kind, for a run the configured one did not start
        # re-attaches Slurm runs and adopts runs whose monitor lives: not onite recover, which waits for none
        self.watches = True
        self.left: list[str] = []  # claims left as they are: their runs go on under their monitors here
        self._cancelled_ahead: set[str] = set()  # claims whose Slurm job recover --host cancelled in flight

    def recover(self) -> None:
        night = self.night
        folders = [self.containment.base] if self.containment.base else []
        removed = contain.sweep_stale(folders + list(self.limiter.v1.values()))
        if removed:  # empty, for their drivers were killed before they wrote a run record
            night.log.event("pruned", cgroups=removed, note="empty job cgroups that killed drivers left")
        try:
            names = os.listdir(night.running_dir)
        except FileNotFoundError:
            return
        except OSError as err:
            night.log.event("error", error=str(SpoolIOError(night.running_dir, "listing", err)), note="recovery skipped")
            return
        jobs = [n for n in names if is_valid_key(n)]
        self._cancelled_ahead = set()
        if not self.watches:  # recover --host: nothing re-attaches, so every Slurm job of the host is cancelled
            self._cancel_ahead(jobs)
        for name in jobs:
            try:
                self._claim(name)
            except Exception as err:  # noqa: BLE001 - one damaged claim must not stop the night
                night.log.event("error", name, error=f"recovering it: {type(err).__name__}: {err}",
                            note="left in running/ for the next driver")
        for name in names:
            if name.endswith(RUN_RECORD) and name[: -len(RUN_RECORD)] not in jobs:
                try:
                    self._unclaimed(name[: -len(RUN_RECORD)])
                except OniteError as err:
                    night.log.event("error", name, error=f"recovering it: {err}", note="left for the next driver")
            elif name.startswith(".") and name.endswith(".tmp"):
                remove_file(night.running_dir / name)  # a run record a dead driver was writing (we hold the lock)
            elif name.endswith(TAKEN_EDIT) and not os.path.lexists(night.running_dir / name[: -len(TAKEN_EDIT)]):
                remove_file(night.running_dir / name)  # its claim was dealt with (``requeue`` puts an edit back)

    def _cancel_ahead(self, jobs: list[str]) -> None:
        """Cancel every Slurm job of the claims before any is waited for: one pending would start on the
        room another's cancel frees, run unwatched, and be cut short by its own cancel and run again."""
        night = self.night
        paths = {name: night.spool.run_record_path(night.host, name) for name in jobs}
        in_flight = {name: rec for name, path in paths.items() if (rec := runrecords.read(path)) is not None
                     and not rec.damaged and not rec.ended and rec.info.get("executor") == "slurm"}
        for unstarted in (True, False):  # those still pending in Slurm first, then those that free room
            for name, rec in in_flight.items():
                if name in self._cancelled_ahead:
                    continue
                try:
                    if self.runner_of(rec.info).cancel_ahead(rec.info, paths[name],
                                                             owner=_owner(night.running_dir / name),
                                                             unstarted=unstarted):
                        self._cancelled_ahead.add(name)
                except OniteError:
                    continue  # its own recovery says why

    def _claim(self, name: str) -> None:
        night = self.night
        path = night.running_dir / name
        record_path = night.spool.run_record_path(night.host, name)
        rec = runrecords.read(record_path)
        if rec is None or rec.damaged:  # a claim always has a readable record: this is damage
            self._damaged(name, path, record_path, rec)
            return
        info, machine = rec.info, rec.info.get("machine")
        if self._already_filed(name, path, info):
            return
        if info.get("executor") == "slurm":
            self._unmonitored(name, path, rec)
        elif not rec.started_job:
            # the monitor records itself before it forks the job, holding the driver lock until then
            self.requeue(name, path, info, "it had not started", rerun=False)
        elif rec.ended:
            if not self.monitor_alive(rec):  # died after recording the end: its clean-up is ours
                self.stop_orphans(rec)
            self._file(name, path, rec)
        elif machine and machine != night.machine:
            self.requeue(name, path, info, f"it ran on {machine}, which cannot be checked from here; "
                         "how it ended is unknown", rerun=True)
        elif info.get("boot") and info.get("boot") != boot_id():
            self.requeue(name, path, info, "the machine restarted while it ran; how it ended is unknown", rerun=True)
        elif not self._adopt(name, path, rec):
            # its monitor is gone and recorded no end: it was killed (kill -9, the OOM killer). It may have ended
            # just now, or been killed ending what its job left: its leader's status was kept
            rec = (runrecords.read(record_path) or rec).kept()
            what = self.stop_orphans(rec)
            if rec.ended:
                self._file(name, path, rec)
            else:
                self.requeue(name, path, info, f"its monitor was killed and recorded no end ({what})", rerun=True)

    def _damaged(self, name: str, path: Path, record_path: Path, rec: RunRecord | None) -> None:
        """A claim whose record is gone or damaged: nothing says whether it ran. What runs of it is
        stopped, a damaged record kept in refused/, and the job run again."""
        night = self.night
        what = "its run record is missing"
        try:
            st = os.lstat(record_path)
        except FileNotFoundError:
            st = None
        if st is not None:
            target = self.finisher.move_aside(record_path, night.spool.record_label(name), st, "a damaged run record",
                                              file_result=False)
            what = f"its run record was damaged (kept in refused/ as {target.name})" if target else \
                "its run record was damaged"
        stopped = self.stop_orphans(rec) if rec is not None else ""
        # with no run record, what the run started carries a run id of this host (whose lock we hold: no live
        # driver has one) and this spool's path; the executor looks for that
        found = night.runner.recover_unrecorded(name, str(night.spool.root),
                                                lambda run_id: run_id_host(run_id) == night.host, owner=_owner(path))
        self.requeue(name, path, rec.info if rec is not None else {}, "; ".join(filter(None, (what, stopped, found))),
                     rerun=True)

    def _unclaimed(self, name: str) -> None:
        """A run record whose claim is gone. Its driver died as it started the job or as it filed the run
        (the job is queued, or a result or retry of it is there): the record goes. Otherwise the claimed
        file was deleted while no driver ran: the job is filed as lost. A damaged record is set aside."""
        night = self.night
        record_path = night.spool.run_record_path(night.host, name)
        rec = runrecords.read(record_path)
        uid = rec.get("uid") if rec is not None else None
        if rec is None and _empty(record_path):  # its driver died as it created it, before any claim: nothing ran
            remove_file(record_path)
            return
        if rec is None or not isinstance(uid, int) or isinstance(uid, bool):
            self.finisher.move_aside(record_path, night.spool.record_label(name), None,
                                     "a damaged run record of a job no longer claimed", file_result=False)
            return
        started = parse_stamp(rec.get("started"))
        try:
            previous = read_result(night.spool, name)
        except OniteError:  # damaged, or unreadable: nothing to tell from it
            previous = None
        run_id = rec.info.get("run_id")
        if previous is not None and run_id and previous.run_id == run_id:  # its run was filed
            if not logged_final(night.spool.log_path, run_id):  # its driver died before it logged the end
                self._log_result(previous)
            remove_file(record_path)
            return
        # its job is queued, running, or finished since (its run was never claimed, or went on to another attempt)
        if any(entry.uid == uid for entry in find_queued(night.spool, name) + find_running(night.spool, name)) or (
                previous is not None and previous.uid == uid and (started is None or previous.finished >= started)):
            remove_file(record_path)
            return
        reason = "lost: its claimed job file was deleted while no driver ran" + (
            "; it had started" if rec.started_job else "; it had not started")
        result = unrun_result(name=name, uid=uid, user=str(rec.get("user") or user_name(uid)), state=JobState.FAILED,
                              reason=reason, host=night.host, now=night.clock.now(),
                              priority=_recorded_rank(rec.info, 0),
                              started=started if rec.started_job else None, run_id=str(rec.get("run_id") or ""))
        if self.finisher.file_unrun(result, JobState.RUNNING, None, "filing a lost job"):
            night.log.event(str(result.state), name, user=result.user, reason=reason, run=result.run_id or None)
            remove_file(record_path)
            night.log.event("recovered", name, action="filed as lost", why=reason)

    def _already_filed(self, name: str, path: Path, info: dict) -> bool:
        """The dead driver wrote the result but died before moving the job into jobsdone/: finish that."""
        night = self.night
        try:
            previous = read_result(night.spool, name)
        except DamagedRecord:
            previous = None  # torn as its driver died: recovered as if it had not been written
        if previous is None or not info.get("run_id") or previous.run_id != info.get("run_id"):
            return False
        try:
            change_state(name, JobState.RUNNING, previous.state, path, night.spool.done_dir / name,
                         "completing a finished job")
        except OniteError as err:
            night.log.event("error", name, error=str(err))
            return True
        remove_file(night.spool.run_record_path(night.host, name))
        night.log.event("recovered", name, action="its result was recorded; filed it")
        self._log_result(previous)
        return True

    def _log_result(self, result: Result) -> None:
        """The line filing logs, for a job whose driver died before it could."""
        self.night.log.event(str(result.state), result.name, user=result.user, reason=result.reason or None,
                         exit=result.exit_code, attempt=result.attempt, run=result.run_id or None, mem=result.mem,
                         note="logged by recovery: its driver died as it filed the job")

    def _run_of(self, name: str, path: Path, info: dict) -> Run:
        """The Run of a claim, from its job file held to its run record.
        Raises OSError, JobFormatError, BadFile, Refused: the file cannot be read, or its owner has no account."""
        night = self.night
        try:
            job, st = read_job_file(path, night.jobs.max_size)
        except (JobFormatError, BadFile) as err:
            # the claim is its owner's file, which they may change: a run that started is recovered
            # from its record (only root writes it), never run again for what its file says now
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or "run_id" not in info:
                raise
            submitted = parse_stamp(info.get("queued")) or parse_stamp(info.get("started")) or night.clock.now()
            job = _stand_in(name, info, submitted, night.host)
            night.log.event("warning", name, error=f"its job file changed while it ran ({err})",
                        note="recovered from its run record")
        rank = _recorded_rank(info, 0 if job.urgent else job.priority)
        run = Run(name=name, job=job, owner=night.jobs.owner(st.st_uid), rank=rank,
                  run_id=str(info.get("run_id") or ""), started=parse_stamp(info.get("started")) or night.clock.now(),
                  started_mono=night.clock.monotonic(), spool=str(night.spool.root),
                  record_path=night.spool.run_record_path(night.host, name), queued_at=parse_stamp(info.get("queued")),
                  need=admitted_need(info))  # it holds what it was admitted with, not what its file says now
        deadline = parse_stamp(info.get("deadline"))  # and the time limit it started with: packing's estimate of its end
        if "deadline" in info and (info["deadline"] is None or (deadline is not None and deadline >= run.started)):
            run.job = job._replace(timeout=deadline - run.started if deadline is not None else None)
        return run

    def _adopt(self, name: str, path: Path, rec: RunRecord) -> bool:
        """Take over a run whose monitor is alive."""
        night = self.night
        if not self.watches and self.monitor_alive(rec):
            self.left.append(name)
            night.log.event("left", name, note="still running under its monitor here; this host's next driver adopts it",
                            monitor=rec.monitor_pid, pid=rec.job_pid)
            return True
        try:
            run = self._run_of(name, path, rec.info)
        except (OSError, OniteError, BadFile):
            return False
        if not night.runner.adopt(run, rec):
            return False
        night.running[name] = run
        night.log.event("recovered", name, action="adopted (still running)", monitor=rec.monitor_pid, pid=rec.job_pid)
        return True

    def _file(self, name: str, path: Path, rec: RunRecord) -> None:
        """File a run that ended while no driver watched it, from what its monitor recorded."""
        night = self.night
        try:
            run = self._run_of(name, path, rec.info)
        except (OSError, OniteError, BadFile) as err:
            self.requeue(name, path, rec.info, f"it ended, but its job file cannot be read ({err})", rerun=False)
            return
        if self._dropped_if_retried(name, path, run):
            return
        run.usage = rec.usage
        outcome = rec.outcome(run.need)  # as a live driver files it, a hard stop putting it back
        if outcome.reason == HARD_STOPPED:
            self.requeue(name, path, rec.info, "a hard stop ended it, and its driver died before it put it back",
                         rerun=True)
            return
        night.log.event("recovered", name, action="filed how it ended while no driver was running",
                        outcome=outcome.describe() or "exit 0")
        self.finisher.record(run, outcome, parse_stamp(rec.ended_at) or night.clock.now())

    def _dropped_if_retried(self, name: str, path: Path, run: Run) -> bool:
        """A later attempt of this job is queued, running on another host or finished (its driver died
        between writing the retry and removing the claim): the stale claim is removed, never run or filed."""
        if not self._retried(run):
            return False
        remove_file(path)
        remove_file(self.night.spool.run_record_path(self.night.host, name))
        self.night.log.event("recovered", name, action="dropped: its retry was already spooled", attempt=run.attempt)
        return True

    def _retried(self, run: Run) -> bool:
        night = self.night
        others = [e for e in find_running(night.spool, run.name) if e.host != night.host]
        for entry in find_queued(night.spool, run.name) + others:
            if entry.uid != run.owner.uid:
                continue  # a forgery at its key says nothing of this job
            try:
                job, _ = read_job_file(entry.path, night.jobs.max_size)
            except (OSError, JobFormatError, BadFile):
                continue
            if job.submitted == run.job.submitted and job.attempt > run.attempt:
                return True
        try:
            previous = read_result(night.spool, run.name)
        except (DamagedRecord, SpoolIOError):
            return False
        return (previous is not None and previous.uid == run.owner.uid and previous.submitted == run.job.submitted
                and previous.attempt > run.attempt)

    def requeue(self, name: str, path: Path, info: dict, what: str, *, rerun: bool) -> None:
        """Put a claim back in its queue (or fail it, with on_interrupt = fail, when it may have run)."""
        night = self.night
        try:
            claimed = self._run_of(name, path, info)
        except (OSError, OniteError, BadFile):
            claimed = None
        if claimed is not None and self._dropped_if_retried(name, path, claimed):
            return
        record_path = night.spool.run_record_path(night.host, name)
        if rerun and night.config.on_interrupt == "fail":
            self._fail(name, path, info, what)
            remove_file(record_path)
            return
        rank = claimed.rank if claimed is not None else _recorded_rank(info, night.config.default_priority)
        owner = _owner(path)
        if owner is not None and any(e.uid == owner for e in find_queued(night.spool, name)):
            remove_file(path)  # a retry was already queued before the crash (not a forgery at its key)
            action = "dropped (its retry is already queued)"
        else:
            # an edit the dead driver took as it claimed the job, before the claimed file held it: for the next claim
            put_back(night.spool.taken_edit_path(night.host, name), night.spool.edit_dir, name)
            try:
                self.finisher.requeue_file(path, name, rank)
            except OniteError as err:
                night.log.event("error", name, error=str(err))
                return
            action = "rerun: requeued" if rerun else "requeued"
        remove_file(record_path)
        night.counts["requeued"] += 1
        night.log.event("recovered", name, action=action, why=what, driver=info.get("driver_pid"))

    def _unmonitored(self, name: str, path: Path, rec: RunRecord) -> None:
        """A claim of a Slurm run (``_take_back``). One whose driver died as sbatch ran (no job id
        recorded) is matched to Slurm's job for exactly this run, if any, so that it never runs twice."""
        owner, info = _owner(path), rec.info
        try:
            if not info.get("external_id") and owner is not None:
                job_id = self.runner_of(info).job_of(info, str(self.night.spool.root), owner)
                info = {**info, "external_id": job_id} if job_id else info
            if self._take_back(name, path, info, rec):
                return
            # make sure it is not still running before it is requeued
            what = self.runner_of(info).recover(info, owner=owner)
        except Unavailable as err:  # keep the claim rather than run the job twice
            self.night.log.event("recovered", name, action="left claimed for the next driver", why=str(err))
            return
        self.requeue(name, path, info, what, rerun=True)

    def _take_back(self, name: str, path: Path, info: dict, rec: RunRecord) -> bool:
        """Re-attach, file or requeue a Slurm run; False if it never reached Slurm.
        Raises Unavailable: it may still run, and cannot be stopped or asked about now."""
        night = self.night
        if not info.get("external_id"):
            return False
        try:
            run = self._run_of(name, path, info)
        except (OSError, OniteError, BadFile):
            return False
        run.external_id = str(info["external_id"])
        run.stopping, run.cancelled_by = rec.stop, rec.stopped_by
        run.nodes = rec.slurm_nodes  # where it ran, if Slurm has forgotten it by now
        run.nice = info["slurm_nice"] if is_whole(info.get("slurm_nice"), 0, 1 << 31) else None
        if self._dropped_if_retried(name, path, run):
            return True
        runner = self.runner_of(info)
        try:
            ended = runner.unwatched_end(run)
        except Unavailable:
            if not self.watches:
                raise
            ended = None  # a driver that watches keeps it, and asks again
        if ended is None and self.watches and night.runner.reattach(run):
            night.running[name] = run
            night.log.event("recovered", name, action="re-attached", slurm=run.external_id)
            return True
        what = f"Slurm job {run.external_id} was cancelled by a hard stop or a recover whose driver died"
        if ended is None or name in self._cancelled_ahead:  # nothing here will watch it: stop it, see how it ended
            what = runner.recover(info, owner=run.owner.uid)
            ended = runner.unwatched_end(run)
        # cancelled by a recovery (this one, or one killed after its cancel: its stop line is a hard stop's), by a
        # hard stop or outside onite, not by an `onite cancel` its record holds: run again
        if ended is None or ended.reason == HARD_STOPPED or ended.cancelled_by is not None and run.stopping != Stop.CANCEL:
            self.requeue(name, path, info, what, rerun=True)
            return True
        night.log.event("recovered", name, action="filed: it ended while no driver watched it", slurm=run.external_id)
        self.finisher.record(run, ended, run.ended or night.clock.now())
        return True

    def _fail(self, name: str, path: Path, info: dict, what: str) -> None:
        """on_interrupt = fail: file a claim that may have run as failed, with what recovery found."""
        night = self.night
        try:
            job, st = read_job_file(path, night.jobs.max_size)
        except (OSError, JobFormatError, BadFile):
            job, st = None, os.lstat(path)
        started = parse_stamp(info.get("started"))
        result = unrun_result(name=name, uid=st.st_uid, user=user_name(st.st_uid), state=JobState.FAILED,
                              reason=f"interrupted: {what}", host=night.host, now=night.clock.now(), job=job,
                              urgent=bool(job and job.urgent), started=started, run_id=info.get("run_id", ""))
        if self.finisher.file_unrun(result, JobState.RUNNING, path, "failing an interrupted job"):
            night.log.event("recovered", name, action="failed (on_interrupt = fail)", processes=what)
            night.notifier.notify(result, job, night.config)

    def monitor_alive(self, rec: RunRecord) -> bool:
        """Is the monitor a run record names still that process, and alive?"""
        pid = rec.monitor_pid
        if not pid or pid <= 1:
            return False
        return contain.process_start_ticks(pid) == rec.monitor_ticks and not contain.is_zombie(pid)

    def stop_orphans(self, rec: RunRecord) -> str:
        """Stop what is left of a run whose monitor is gone; what happened, for the log."""
        killed = stop_leftovers(rec, self.containment, self.limiter, str(self.night.spool.root),
                                str(rec.get("name") or ""), str(rec.get("run_id") or ""))
        return "its processes were killed" if killed else "none of its processes was running"

    def runner_of(self, info: dict) -> Runner:
        """The executor that started the run (a Slurm job is cancelled after a change of ``executor`` too)."""
        night = self.night
        executor = info.get("executor") or night.runner.executor
        if executor == night.runner.executor:
            return night.runner
        try:
            return self.make_runner(executor)
        except OniteError:
            return night.runner


def _empty(path: str) -> bool:
    try:
        return os.lstat(path).st_size == 0
    except OSError:
        return False


def _owner(path: Path) -> int | None:
    """The uid of a claim (only root renames into running/: the file is still its owner's)."""
    try:
        return os.lstat(path).st_uid
    except OSError:
        return None


def _recorded_rank(info: dict, fallback: int) -> int:
    """The queue a run record says its job came from (0: urgent), or ``fallback`` where it says none that is."""
    rank = info.get("rank")
    return rank if is_whole(rank, 0, MAX_PRIORITIES) else fallback


def _stand_in(name: str, info: dict, submitted: datetime, host: str) -> Job:
    """The job of a claim whose file can no longer be read, from its run record: enough to watch and
    file the run, not to retry it."""
    rank = _recorded_rank(info, 1)
    attempt = info["attempt"] if is_whole(info.get("attempt"), 1, MAX_RETRIES + 1) else 1
    return Job(name=name, priority=max(rank, 1), urgent=rank == 0, submitted=submitted, host=host, umask=0o022,
               cwd=b"/", env={}, body=b"", attempt=attempt, retries=attempt - 1)
