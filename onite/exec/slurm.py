"""The slurm executor: each claimed job becomes one Slurm batch job, submitted as its owner.

One ``squeue`` per poll watches every job in flight; a time limit is enforced at its exact deadline
(Slurm checks every 30 s or so); a cancel is an ``scancel``, repeated while the job lingers. Slurm
jobs outlive the driver: recovery takes a run back by the job id in its record, or by the run's id
in the job's comment, among its owner's jobs only (a comment is its owner's to write).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from onite.core.clock import SYSTEM, Clock
from onite.core.config import Config
from onite.core.errors import ConfigError
from onite.core.names import job_label
from onite.core.state import Outcome, Stop, stopped_outcome
from onite.exec import processes, sbatch, squeue
from onite.exec.contain import is_zombie, process_start_ticks, signal_exact
from onite.exec.plan import memory_file
from onite.exec.runner import Run, Runner, SpawnError, Unavailable, job_environment, record_stop, run_outputs
from onite.spool import runrecords

SBATCH_TIMEOUT = 60.0  # sbatch returns in milliseconds; a controller that does not answer costs ~20 s
RECANCEL = 10.0  # seconds before a cancel is repeated for a job that is still there
TOOL_PATH = "/usr/local/bin:/usr/bin:/bin"
SBATCH_GONE_WAIT = 10.0  # seconds a killed sbatch is waited for
SUBMISSION_SETTLE = 1.0  # seconds the controller is given to take a submission its dying sbatch sent
CANCEL_WAIT = 60.0  # seconds a cancelled job is waited for at least: past Slurm's KillWait (default 30 s)
STATE_LINES = 64  # "slurm" lines a run's record gets at most (its owner may hold and release their job at will)
OUTPUT_LIMIT = 1 << 20  # bytes of sbatch's stdout or stderr read back (it says a line or two)
FILE_LIMIT = 4 << 20  # bytes it may write to a file: its output files are memory, which a user tracing it must not fill


def find_tool(name: str) -> str:
    """Absolute path of a Slurm client command (sbatch runs with an empty environment); ConfigError if missing."""
    path = shutil.which(name) or shutil.which(name, path=TOOL_PATH)
    if path is None:
        raise ConfigError(f'executor = "slurm" but the Slurm command {name} is not installed here',
                          'install the Slurm client commands (Debian: slurm-client), or set executor = "local"')
    return os.path.abspath(path)


@dataclass
class Submission:
    """An ``sbatch`` in flight as the job's owner, who may stop or trace it: never blocked on (its files are
    memory, its end is seen through its pidfd), killed at its deadline."""

    proc: subprocess.Popen
    out_fd: int
    err_fd: int
    deadline: float  # on the driver's monotonic clock: killed if still running then
    pidfd: int | None  # readable once it has exited (None: it is polled)
    record_fd: int | None  # its run's record (O_APPEND), where its job's id goes; closed with it (None: an Unsure's)
    script_size: int

    def close(self) -> None:
        for fd in (self.out_fd, self.err_fd, self.pidfd, self.record_fd):
            if fd is not None:
                os.close(fd)


@dataclass
class Unsure:
    """A run whose sbatch ended without a job id it can be held to, yet may have submitted the job: Slurm is
    asked for it at ``at``."""

    at: float  # on the driver's monotonic clock
    fails_with: str  # the run's reason if Slurm answers and has no job of it
    unsent: str | None  # sbatch said it never reached the controller: the Unavailable reason if Slurm cannot be asked
    record_fd: int  # its run's record, where the id goes once found

    def close(self) -> None:
        os.close(self.record_fd)


def _limit_files() -> None:
    """In the child, as its owner (nothing imported: it may not read our modules); a hard limit it cannot raise."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


class SlurmRunner(Runner):
    """Runs each job as a Slurm batch job of its owner and reports how it ended."""

    executor = "slurm"

    def __init__(self, config: Config, *, switch_user: bool, log=None, clock: Clock = SYSTEM) -> None:
        if problem := sbatch.unsupported_args(config.slurm.sbatch_args):
            raise ConfigError(f"[slurm] sbatch_args: {problem}", "remove it from onite.toml")
        self.clock = clock  # the driver's: polls, time limits and cancel retries are read on it
        self.config = config
        self.switch_user = switch_user
        self.log = log
        self.sbatch = find_tool("sbatch")
        self.squeue = find_tool("squeue")
        self.scancel = find_tool("scancel")
        # only the location of slurm.conf passes to sbatch: anything else (SBATCH_*) would act as options
        self._tool_env = {k: os.environ[k] for k in ("SLURM_CONF",) if k in os.environ}
        self.runs: list[Run] = []
        self._next_poll: float | None = None
        self._started: set[str] = set()  # job ids whose real start has been seen
        self._noted: dict[str, tuple[tuple, int]] = {}  # job id → (state, reason, start) last written to its record, lines
        self._unreachable = False
        self._submitting: dict[str, Submission] = {}  # by run id
        self._unsure: dict[str, Unsure] = {}  # by run id

    @property
    def poll_interval(self) -> float:
        return max(self.config.slurm.poll.total_seconds(), 0.05)

    def reload(self, config: Config) -> None:
        """New settings (SIGHUP), unless their sbatch_args are refused; runs in Slurm keep theirs."""
        if problem := sbatch.unsupported_args(config.slurm.sbatch_args):
            if self.log is not None:
                self.log.event("reload-failed", error=f"[slurm] sbatch_args: {problem}",
                               note="keeping the previous Slurm settings")
            return
        self.config = config

    def start(self, run: Run, output_path: Path, *, append: bool, stderr_path: Path, record_fd: int) -> None:
        """Start ``run``'s sbatch as its owner and return; its job id goes into the run's record once sbatch
        says it, and ``reap`` tells a failure. SpawnError: why not."""
        job = run.job
        env = job_environment(run, switch_user=self.switch_user)
        script = sbatch.script_text(job.body, self.config.shell)
        if problem := sbatch.unsupported_directive(script):
            raise SpawnError(problem)
        if too_big := sbatch.oversized_variable(env):
            raise SpawnError(f"its environment variable {too_big} exceeds the kernel's 128 KiB limit for one variable")
        # its directory is entered as the owner, by the wrapper sbatch runs behind (as_owner_in): a look
        # as root first would tell a user about directories they may not enter
        output = Path(os.path.abspath(output_path))
        stderr_file = Path(os.path.abspath(stderr_path))
        ident = run.owner if self.switch_user else None
        with run_outputs(run, output, stderr_file, ident, append=append):
            pass  # created here, for the owner, so that Slurm (which opens them as the owner) only appends
        run.nice = self._nice(run)
        env_fd = memory_file(f"onite-env:{run.name}", sbatch.export_file(env))
        fds: list[int] = []  # its stdin, stdout and stderr, then its run's record
        try:
            argv = sbatch.sbatch_argv(self.sbatch, name=run.name, cwd=job.cwd, output=os.fsencode(output),
                                      error=os.fsencode(stderr_file) if job.stderr_separate else None,
                                      env_fd=env_fd, timeout=job.timeout, priority=job.priority,
                                      urgent=run.rank == 0, slurm=self.config.slurm,
                                      comment=sbatch.run_comment(run.run_id, run.spool) if run.spool else None,
                                      mem=run.mem, cpus=run.cpus)
            for name, data in (("onite-script", script), ("onite-sbatch-out", b""), ("onite-sbatch-err", b"")):
                fds.append(memory_file(name, data))
            fds.append(os.dup(record_fd))
            proc = subprocess.Popen(
                sbatch.as_owner_in(job.cwd, argv), stdin=fds[0], stdout=fds[1], stderr=fds[2], env=self._tool_env,
                cwd="/", umask=job.umask, pass_fds=(env_fd,), preexec_fn=_limit_files,
                **({"user": ident.uid, "group": ident.gid, "extra_groups": list(ident.groups)} if ident else {}),
            )
        except BaseException as err:
            for fd in fds[1:]:
                os.close(fd)
            if isinstance(err, OSError):
                raise SpawnError(f"cannot run sbatch: {err.strerror or err}") from None
            raise
        finally:
            os.close(env_fd)
            if fds:
                os.close(fds[0])
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:
            pidfd = None  # polled instead
        self._submitting[run.run_id] = Submission(proc=proc, out_fd=fds[1], err_fd=fds[2], pidfd=pidfd,
                                                  record_fd=fds[3], script_size=len(script),
                                                  deadline=self.clock.monotonic() + SBATCH_TIMEOUT)
        self.runs.append(run)

    def _took(self, run: Run, sub: Submission) -> Outcome | None:
        """An sbatch that is over: None once its job id is taken (or Slurm is to be asked for it), else why not."""
        out, err = os.pread(sub.out_fd, OUTPUT_LIMIT, 0), os.pread(sub.err_fd, OUTPUT_LIMIT, 0)
        job_id, why = sbatch.answer(sub.proc.returncode, out, err, script_size=sub.script_size, cwd=run.job.cwd,
                                    owner=run.owner.name)
        if job_id is None:
            lost = sbatch.lost_controller(err)
            if lost is None:
                return Outcome(reason=why, never_started=True)  # sbatch refused it: Slurm never had it
            unsent = f"{sbatch.UNREACHED}: {sbatch.refusal(err)}" if lost == sbatch.UNSENT else None
            self._doubt(run, sub, why, unsent)
            return None
        # the owner may trace sbatch and make it say another job's id: the job must be theirs (or Slurm not answer)
        asked, status = self._ours(job_id, run.owner.uid)
        if asked and status is None:
            # cancel what it submitted (found by its run's comment), never a job of that name from another spool
            for submitted in self._jobs_of_run(run.name, run.run_id, run.spool, run.owner.uid) or ():
                self._scancel(submitted, run.owner.uid)
            return Outcome(reason=f"sbatch said it submitted job {job_id}, which Slurm does not know as "
                                  f"{run.owner.name}'s")
        self._taken(run, job_id, sub.record_fd)
        return None

    def _taken(self, run: Run, job_id: str, record_fd: int) -> None:
        """``run`` is Slurm's job ``job_id``: recorded, and watched from now on."""
        run.external_id = job_id
        try:
            runrecords.append(record_fd, {"event": "submitted", "external_id": job_id})
        except OSError as error:  # recovery finds it by the run's id in its comment all the same
            if self.log is not None:
                self.log.event("warning", run.name, error=f"cannot record its Slurm job id: {error.strerror}")
        run.announced = True
        if run.stopping is not None:  # stopped while sbatch ran: now there is a job to cancel
            self._cancel(run)
        if self._next_poll is None:
            self._next_poll = self.clock.monotonic() + self.poll_interval

    def _doubt(self, run: Run, sub: Submission, fails_with: str, unsent: str | None) -> None:
        """sbatch's word (its owner's to forge) cannot settle whether it submitted the job: Slurm is asked, at
        once if sbatch says it sent nothing, else once the controller had a moment to take what it was sent."""
        settle = 0.0 if unsent else SUBMISSION_SETTLE
        self._unsure[run.run_id] = Unsure(at=self.clock.monotonic() + settle, fails_with=fails_with,
                                          unsent=unsent, record_fd=sub.record_fd)
        sub.record_fd = None  # the Unsure's now

    def _settle(self, run: Run, unsure: Unsure) -> Outcome | None:
        """An unsure run: its one job in Slurm (its owner's, with its run's comment) is taken, else it fails;
        while Slurm cannot be asked it waits (or is unavailable, if sbatch never reached it)."""
        found = self._jobs_of_run(run.name, run.run_id, run.spool, run.owner.uid)
        if found is None and unsure.unsent is None:
            unsure.at = self.clock.monotonic() + self.poll_interval  # it may be in Slurm: ask again
            return None
        del self._unsure[run.run_id]
        try:
            if found is None:  # sbatch never reached the controller, which still does not answer
                run.unavailable = unsure.unsent
                return Outcome(reason=unsure.unsent, never_started=True)
            if len(found) == 1:
                self._taken(run, found[0], unsure.record_fd)
                return None
            if found:  # its owner copied its comment: none can be told for its own, and none runs on unwatched
                for job_id in found:
                    self._scancel(job_id, run.owner.uid)
                return Outcome(reason=f"{unsure.fails_with}; Slurm holds {len(found)} jobs of its owner with its "
                               f"run's comment ({', '.join(found)}), all cancelled", never_started=True)
            return Outcome(reason=unsure.fails_with, never_started=True)
        finally:
            unsure.close()

    def _collect_submissions(self) -> list[tuple[Run, Outcome]]:
        """Settle the submissions that are over (or past their deadline: killed) and the unsure runs due now."""
        failed = []
        now = self.clock.monotonic()
        for run in [r for r in self.runs if r.run_id in self._submitting or r.run_id in self._unsure]:
            sub, unsure = self._submitting.get(run.run_id), self._unsure.get(run.run_id)
            if unsure is not None:
                if now < unsure.at:
                    continue
                outcome = self._settle(run, unsure)
            elif sub.proc.poll() is None:
                if now < sub.deadline:
                    continue
                sub.proc.kill()
                sub.proc.wait()
                # it may have sent the job before it hung
                self._doubt(run, sub, f"sbatch did not return within {SBATCH_TIMEOUT:g} s", None)
                outcome = None
            else:
                outcome = self._took(run, sub)
            if sub is not None:
                self._submitting.pop(run.run_id).close()
            if outcome is not None:  # a cancel (or stop) asked for while sbatch ran is what is recorded
                failed.append((run, stopped_outcome(outcome, run.stopping, run.cancelled_by) or outcome))
        return failed

    def close(self) -> None:
        """The drain is over: an sbatch still running is left to finish; the next driver takes its job back."""
        for held in [*self._submitting.values(), *self._unsure.values()]:
            held.close()
        self._submitting.clear()
        self._unsure.clear()

    def stop(self, run: Run, why: Stop, *, by: str | None = None) -> None:
        """Cancel ``run`` in Slurm (TERM, then KILL after Slurm's KillWait)."""
        if run.stopping is None:
            run.stopping, run.cancelled_by = why, by
            record_stop(run.record_path, why, by)  # a driver that dies before Slurm confirms leaves why to the next
        if run.kill_at is None:
            self._cancel(run)

    def _cancel(self, run: Run) -> None:
        if run.external_id is None:
            return  # sbatch still runs: the cancel is sent once it has said the job's id (_took)
        self._scancel(run.external_id, run.owner.uid)
        now = self.clock.monotonic()
        run.kill_at = now + RECANCEL
        # a cancelled job usually ends within milliseconds: look again soon, not a whole poll later
        self._next_poll = now + 0.2 if self._next_poll is None else min(self._next_poll, now + 0.2)

    def tick(self, now_mono: float) -> None:
        """Enforce exact time limits; repeat cancels that have not taken effect."""
        for run in self.runs:
            if run.stopping is None and run.timeout_at is not None and now_mono >= run.timeout_at:
                self.stop(run, Stop.TIMEOUT)
            elif run.kill_at is not None and now_mono >= run.kill_at:
                self._cancel(run)

    def reap(self) -> list[tuple[Run, Outcome]]:
        """Runs that ended in Slurm since the last poll, with their outcomes (polls when due)."""
        finished = self._collect_submissions()
        now = self.clock.monotonic()
        watched = [run for run in self.runs if run.external_id is not None and run.run_id not in self._submitting]
        if not watched or (self._next_poll is not None and now < self._next_poll):
            if not self.runs:
                self._next_poll = None
            return self._done(finished)
        self._next_poll = now + self.poll_interval
        answer = self._query([run.external_id for run in watched])
        if answer is None:
            return self._done(finished)
        for run in watched:
            status = self._owned(answer, run.external_id, run.owner.uid)
            if status is None:
                finished.append((run, squeue.lost(run.external_id)))
                continue
            self._note_start(run, status)
            if status.is_final:
                if status.state != "CANCELLED" and run.stopping in (Stop.SHUTDOWN, Stop.CANCEL):
                    run.stopping = None  # it ended on its own first: record what it did, do not requeue
                finished.append((run, squeue.outcome(status, stopping=run.stopping, cancelled_by=run.cancelled_by)))
                continue
            self._note_state(run, status)
            run.pending = self._pending(run, status)
            if run.stopping is None and squeue.never_starts(status):
                # it would hold its slot all night (and a graceful stop would wait for it): it fails
                ask = self._run_tool(squeue.ask_argv(self.squeue, run.external_id))
                self.stop(run, Stop.NEVER, by=squeue.never_reason(
                    status, ask.stdout.decode("utf-8", "replace") if ask and ask.returncode == 0 else ""))
            elif run.stopping is None and status.restarts:
                # started, and put back in Slurm's queue (its owner may undo --no-requeue): it would run again
                self.stop(run, Stop.CANCEL, by=f"onite: Slurm requeued it ({status.state}, {status.reason}) after "
                                               "it had started, and onite runs a job once")
            elif run.stopping is None and None not in (status.nice, run.nice) and status.nice < run.nice:
                # Slurm lets its owner lower it, to start before the jobs that wait in Slurm ahead of it
                self.stop(run, Stop.CANCEL, by=f"onite: its nice in Slurm was lowered from {run.nice} to "
                                               f"{status.nice}, and its place among waiting jobs is onite's")
        return self._done(finished)

    def _done(self, finished: list[tuple[Run, Outcome]]) -> list[tuple[Run, Outcome]]:
        done = {run for run, _ in finished}  # a Run is hashed by its identity
        self.runs = [run for run in self.runs if run not in done]
        for run in done:
            self._started.discard(run.external_id)
            self._noted.pop(run.external_id, None)
        return finished

    def _pending(self, run: Run, status: squeue.JobStatus) -> bool:
        """Its job waits in Slurm's queue and has never started."""
        return status.state == "PENDING" and not status.restarts and run.external_id not in self._started

    def unstarted(self) -> list[Run]:
        """Its runs, none being stopped, whose job the last poll saw waiting in Slurm's queue, never started, and
        that Slurm still holds so when asked now."""
        runs = [run for run in self.runs if run.pending and run.stopping is None]
        answer = self._query([run.external_id for run in runs]) if runs else None
        for run in runs:  # unanswered: asked again once the next poll has seen it pending, not on every turn
            status = self._owned(answer, run.external_id, run.owner.uid)
            run.pending = status is not None and self._pending(run, status)
        return [run for run in runs if run.pending]

    def _note_start(self, run: Run, status: squeue.JobStatus) -> None:
        """The first sight of a real start: the run's start time and its exact deadline come from it."""
        if status.start is None or run.external_id in self._started:
            return
        self._started.add(run.external_id)
        run.nodes = status.nodes or run.nodes
        waited = (status.start - run.started).total_seconds()
        if waited >= 0:
            run.started = status.start
        if run.job.timeout is not None:
            # StartTime is cut to the second: counting from the latest possible start never cuts its time short
            now_wall = time.time()  # compared with Slurm's StartTime: the real clock
            elapsed = now_wall - min(status.start.timestamp() + 1.0, now_wall)
            run.timeout_at = self.clock.monotonic() - elapsed + run.job.timeout.total_seconds()
        if self.log is not None:
            self.log.event("slurm-start", run.name, slurm=run.external_id, waited=f"{max(waited, 0):.1f}s")

    def _note_state(self, run: Run, status: squeue.JobStatus) -> None:
        """Its job's state, reason, start and nodes in Slurm into its record when they change (for list,
        status and recovery)."""
        now = (status.state, status.reason[:200], status.start.isoformat() if status.start else None, status.nodes)
        last, lines = self._noted.get(run.external_id, (None, 0))
        if now == last or lines >= STATE_LINES or not run.record_path:
            return
        self._noted[run.external_id] = (now, lines + 1)
        with contextlib.suppress(runrecords.RecordError):  # a view's detail: the run goes on without it
            runrecords.add_event(run.record_path, {"event": "slurm", "state": now[0], "reason": now[1],
                                                   "started": now[2], "nodes": now[3]})

    def _job_uid(self, owner: int | None) -> int:
        """Whose Slurm jobs the runs of ``owner`` are: theirs, or the driver's where jobs are not run as their owners
        (every helper that asks Slurm about, or cancels, ``owner``'s jobs maps it so)."""
        return owner if self.switch_user and owner is not None else os.geteuid()

    def _owned(self, answer: dict[str, squeue.JobStatus] | None, job_id: str,
               owner: int | None) -> squeue.JobStatus | None:
        """What ``answer`` (None: none) says of ``job_id`` if it is the job of ``owner`` (its owner may forge
        neither)."""
        status = answer.get(job_id) if answer is not None else None
        return status if status is not None and status.uid == self._job_uid(owner) else None

    def _ours(self, job_id: str, owner: int | None) -> tuple[bool, squeue.JobStatus | None]:
        """(False, None) if Slurm could not be asked for ``job_id``, else (True, its status if it is
        ``owner``'s job, or None)."""
        answer = self._query([job_id])
        return answer is not None, self._owned(answer, job_id, owner)

    def _query(self, job_ids: list[str]) -> dict[str, squeue.JobStatus] | None:
        """squeue's answer, or None while the controller cannot be asked (the runs stay as they are)."""
        done = self._run_tool(squeue.query_argv(self.squeue, job_ids))
        if done is not None and done.returncode == 0:
            answer = squeue.parse(done.stdout.decode("utf-8", "replace"))
        elif done is not None and squeue.is_unknown_ids(done.returncode, done.stderr.decode("utf-8", "replace")):
            # squeue refuses the whole list for one id it does not know: ask for each, not taking all for gone
            answer = {}
            for job_id in job_ids if len(job_ids) > 1 else ():
                one = self._query([job_id])
                if one is None:
                    return None
                answer.update(one)
        else:
            if not self._unreachable and self.log is not None:
                why = done.stderr.decode("utf-8", "replace").strip().replace("\n", " ") if done else "no answer"
                self.log.event("slurm-unreachable", error=why[:300], note="jobs stay as they are; asking again")
            self._unreachable = True
            return None
        if self._unreachable and self.log is not None:
            self.log.event("slurm-reachable")
        self._unreachable = False
        return answer

    def _scancel(self, job_id: str, owner: int | None) -> None:
        # --user skips a job not the run's (ids restart if Slurm's state is wiped); not the name, its owner's to change
        self._run_tool([self.scancel, "--quiet", f"--user={self._job_uid(owner)}", job_id])

    def _run_tool(self, argv: list[str]) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(argv, capture_output=True, env=self._tool_env, stdin=subprocess.DEVNULL,
                                  timeout=SBATCH_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            return None

    def next_deadline(self) -> float | None:
        """The next poll, time limit, cancel retry or sbatch deadline."""
        times = [t for run in self.runs
                 for t in (run.timeout_at if run.stopping is None else None, run.kill_at) if t is not None]
        if self.runs and self._next_poll is not None:
            times.append(self._next_poll)
        for sub in self._submitting.values():
            times.append(sub.deadline if sub.pidfd is not None else min(sub.deadline, self.clock.monotonic() + 0.02))
        times.extend(unsure.at for unsure in self._unsure.values())
        return min(times) if times else None

    def wait_fds(self) -> list[int]:
        return [sub.pidfd for sub in self._submitting.values() if sub.pidfd is not None]

    def record_info(self, run: Run) -> dict:
        """Its Slurm job's name and nice (its id follows in a ``submitted`` line once sbatch says it)."""
        return {"slurm_name": job_label(run.name), "slurm_nice": self._nice(run)}

    def _nice(self, run: Run) -> int:
        """The --nice ``run`` is submitted with: its place among the jobs waiting in Slurm."""
        return sbatch.nice_for(run.job.priority, run.rank == 0, self.config.slurm.nice_step)

    def reattach(self, run: Run) -> bool:
        """Take back a run a dead driver left in Slurm; False if Slurm no longer knows it."""
        asked, status = self._ours(run.external_id, run.owner.uid)
        # the controller cannot say: keep the run rather than submit the job twice
        if asked and status is None:
            return False
        self.runs.append(run)
        self._next_poll = self.clock.monotonic()  # look at once: it may have finished meanwhile
        if run.stopping is not None:  # its dead driver's cancel may not have reached Slurm
            self._cancel(run)
        return True

    def unwatched_end(self, run: Run) -> Outcome | None:
        """How a run a dead driver left in Slurm ended: as Slurm says, or lost (not run again) if Slurm forgot
        it; None: still in flight. Unavailable: Slurm cannot say."""
        asked, status = self._ours(run.external_id, run.owner.uid)
        if not asked:
            raise Unavailable("Slurm could not be asked how the job ended")
        if status is None:
            return squeue.lost(run.external_id, unwatched=True)
        if not status.is_final:
            return None
        if status.start is not None:
            run.started, run.nodes = status.start, status.nodes or run.nodes
        if status.end is not None:  # filed when it ended, not when a driver came to see it
            run.ended = max(status.end, run.started)
        return squeue.outcome(status, stopping=run.stopping, cancelled_by=run.cancelled_by)

    def recover(self, info: dict, *, owner: int | None = None) -> str:
        """Make sure no Slurm job (``owner``'s) of a run that could not be re-attached is left. Unavailable: Slurm
        cannot be asked, or the job is still in flight after its cancel."""
        job_id = info.get("external_id")
        if not job_id:
            return "no Slurm job of it is in flight"
        asked, status = self._ours(job_id, owner)
        if not asked:
            raise Unavailable(f"Slurm could not be asked about job {job_id}")
        if status is None:
            return f"Slurm no longer knows job {job_id}"
        if status.is_final:
            return f"Slurm job {job_id} had ended ({status.state})"
        return self._cancel_and_wait(job_id, owner)

    def cancel_ahead(self, info: dict, record_path: Path, *, owner: int | None = None, unstarted: bool = False) -> bool:
        """``recover --host`` cancels every job of the dead host before it waits for any, so that none pending
        starts on the room another's cancel frees. The hard stop goes into its record first: a recover killed
        after the cancel leaves the next one to run the job again, not to file it as cancelled outside onite."""
        job_id = info.get("external_id")
        if not job_id:
            return False
        asked, status = self._ours(str(job_id), owner)
        if not asked or status is None or status.is_final or unstarted and status.start is not None:
            return False
        record_stop(record_path, Stop.SHUTDOWN, "onite recover --host")
        self._scancel(str(job_id), owner)
        return True

    def recover_unrecorded(self, name: str, spool: str, run_id_ok, *, owner: int | None = None) -> str:
        """A claim with no run record: a job its driver's sbatch submitted, found by name and comment, is cancelled."""
        jobs = self._jobs_of(name, spool, owner)
        if jobs is None:
            return "no run record, and Slurm could not be asked whether a job of it was submitted"
        found = [job_id for job_id, state, run_id in jobs if state not in squeue.FINAL and run_id_ok(run_id)]
        if not found:
            return "no run record, and none of its Slurm jobs in flight (sbatch never ran: its record comes first)"
        return "no run record; " + "; ".join(self._cancel_and_wait(job_id, owner) for job_id in found)

    def _cancel_and_wait(self, job_id: str, owner: int | None) -> str:
        """Cancel the job and wait (past Slurm's KillWait, and kill_grace) until it is over: a job run again must
        not overlap its predecessor. Unavailable: still in flight (or unknown) at the end."""
        self._scancel(job_id, owner)
        deadline = time.monotonic() + max(self.config.kill_grace.total_seconds(), CANCEL_WAIT)
        while True:
            answer = self._query([job_id])
            status = answer.get(job_id) if answer else None
            if answer is not None and (status is None or status.is_final):
                ended = status.state if status is not None else "gone"
                return f"Slurm job {job_id} was cancelled" if ended in ("CANCELLED", "gone") else \
                    f"Slurm job {job_id} ended ({ended}) as it was cancelled"
            if time.monotonic() >= deadline:
                raise Unavailable(f"Slurm job {job_id} was sent a cancel and is still "
                                  f"{status.state if status else 'unknown'}")
            time.sleep(0.2)

    def job_of(self, info: dict, spool: str, owner: int | None) -> str | None:
        """The one job of ``owner`` whose comment names the run of a driver that died as sbatch ran, else None
        (none, or several: each cancelled). Unavailable: Slurm cannot be asked, or a copy outlives its cancel."""
        if not info.get("run_id") or not info.get("name"):
            return None
        self._stop_left_sbatch(info["run_id"], spool, owner)
        found = self._jobs_of_run(info["name"], info["run_id"], spool, owner)
        if found is None:
            raise Unavailable("Slurm could not be asked for the job of this run")
        if len(found) > 1:  # its owner copied its comment: none can be told for its own, and none runs on unwatched
            for job_id in found:
                self._cancel_and_wait(job_id, owner)
            return None
        return found[0] if found else None

    def _jobs_of(self, name: str, spool: str, owner: int | None) -> list[tuple[str, str, str]] | None:
        """``owner``'s jobs of ``name`` whose comment names a run of ``spool``, in flight or ended within MinJobAge,
        as (job id, state, run id); None if Slurm could not be asked."""
        done = self._run_tool(squeue.search_argv(self.squeue, job_label(name), self._job_uid(owner)))
        if done is None or done.returncode != 0:
            return None
        found = squeue.parse_search(done.stdout.decode("utf-8", "replace"))
        return [(job_id, state, run_id) for job_id, state, comment in found
                if (run_id := sbatch.run_of_comment(comment, spool))]

    def _jobs_of_run(self, name: str, run_id: str, spool: str, owner: int | None) -> list[str] | None:
        """The ids of ``owner``'s jobs of ``name`` whose comment names run ``run_id`` (as ``_jobs_of``)."""
        jobs = self._jobs_of(name, spool, owner)
        return None if jobs is None else [job_id for job_id, _, of in jobs if of == run_id]

    def _stop_left_sbatch(self, run_id: str, spool: str, owner: int | None) -> None:
        """Kill an sbatch of the run that outlived its driver (it could submit after the search), then give the
        controller a moment to take what it sent. Unavailable: it is still there after SIGKILL."""
        argument = f"--comment={sbatch.run_comment(run_id, spool)}".encode()
        left = processes.with_argument(argument, self._job_uid(owner))
        if not left:
            return
        for pid, ticks in left:
            signal_exact(pid, ticks, signal.SIGKILL)
        deadline = time.monotonic() + SBATCH_GONE_WAIT
        while any(process_start_ticks(pid) == ticks and not is_zombie(pid) for pid, ticks in left):
            if time.monotonic() >= deadline:
                raise Unavailable(f"the sbatch its dead driver started (pid {left[0][0]}) does not exit")
            time.sleep(0.05)
        time.sleep(SUBMISSION_SETTLE)
