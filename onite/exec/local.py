"""The local executor: each job under a monitor process, on this machine.

``LocalRunner.start`` decides the command line and environment
(onite.exec.launch), opens the job's output files, and has a monitor
(onite.exec.monitor) take the run: one the spawner keeps (onite.exec.spawner),
else one it forks. The monitor records itself in the run record, starts the
job and records how it ended:

- when the driver is root the job never runs anything as root on its owner's
  behalf: its directory is entered with the owner's rights, and its process
  drops to the owner (setgroups, setgid, setuid: real, effective and saved
  ids) before it looks up its interpreter (onite.exec.jobstart);
- a new session: the job leads its own process group and has no
  controlling terminal; where the machine allows, it runs in a cgroup of its
  own, so that everything it starts can be ended with it (onite.exec.contain).

The monitor tells the driver over a pipe when the job started and ended; a
run adopted from a dead driver has no pipe, and its record says how it ended.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from onite.core.clock import SYSTEM, Clock
from onite.core.names import job_label
from onite.core.state import Outcome, Stop, memory_outcome, outcome_from_status, stopped_outcome
from onite.exec import contain, limits, monitor
from onite.exec.identity import Identity
from onite.exec.monitorlink import MonitorLink, parse_usage
from onite.exec.localrecover import LocalRecovery
from onite.exec.launch import (SCRIPT, credentials_of, occupy_standard_descriptors, own_credentials, plan,
                               run_outputs)
from onite.exec.runner import NoRecord, Run, Runner, SpawnError
from onite.exec.spawner import Spawner, SpawnerGone
from onite.spool import runrecords


class LocalRunner(LocalRecovery, Runner):
    """Starts each job under a monitor (onite.exec.monitor), enforces time limits, reports
    how jobs ended.

    A time limit or a stop is SIGTERM to every process of the job (its group, and its cgroup
    where jobs have one), then SIGKILL after ``kill_grace``. When a job's leader exits, its monitor
    ends whatever it left running (onite.exec.contain), so no stray process outlives its job and the slot
    bound means what it says; the driver waits for those monitors before it exits.
    """

    executor = "local"
    writes_record = True

    def __init__(self, *, shell: str, kill_grace: float, switch_user: bool,
                 containment: contain.Containment | None = None, lock_fd: int | None = None,
                 clock: Clock = SYSTEM, limiter: limits.Limiter | None = None) -> None:
        self.shell = shell
        self.clock = clock  # the driver's: time limits and kill deadlines are read on it
        self.kill_grace = kill_grace
        self.switch_user = switch_user
        self.containment = containment or contain.Containment(contain.OFF, why="not asked for")
        if self.containment.kind != contain.OFF:
            contain.preload()  # each monitor makes itself a subreaper: with libc loaded before the fork
        self.lock_fd = lock_fd  # the driver lock: each monitor holds it until its first record line
        self.limiter = limiter or limits.Limiter(why="not asked for")
        self.runs: list[Run] = []
        self._lingering: list[MonitorLink] = []  # monitors ending what their job left behind
        self._started: list[Run] = []
        self._exited: list[Run] = []
        self._credentials = own_credentials()
        self._boot = contain.boot_id()
        self._spawner = Spawner(self.containment.kind != contain.OFF)  # forks the monitors: this big process never does
        self._ready: tuple | None = None  # what the run made ready ahead was made of (``prepare``)
        occupy_standard_descriptors()

    def close(self) -> None:
        """Let the spawner go (the next start begins another); running monitors are not its. A run
        made ready ahead is dropped."""
        self._ready = None
        self._spawner.close()
        self._spawner = Spawner(self.containment.kind != contain.OFF)

    def reload(self, config) -> None:
        self.discard()  # what was made ready ahead was made with the settings before
        self.shell = config.shell
        self.kill_grace = config.kill_grace.total_seconds()

    # ---- starting --------------------------------------------------------------

    def start(self, run: Run, output_path: Path, *, append: bool, stderr_path: Path | None = None,
              record: tuple[str, dict] | None = None) -> None:
        """Start ``run`` under its monitor; returns at once (the monitor reports the start). A run
        made ready ahead (``prepare``) is started by the monitor that holds it.

        Raises:
            SpawnError: its output files cannot be made (the job is recorded as failed).
            NoRecord: its run record cannot be written: nothing was started.
        """
        ready = self._take_ready(run)
        try:
            self._start(run, output_path, append, stderr_path, record, ready)
        finally:
            if self._spawner.has_ready:  # made ready for this run, which did not start: it undoes it
                self._spawner.drop()

    def _start(self, run: Run, output_path: Path, append: bool, stderr_path: Path | None,
               record: tuple[str, dict] | None, ready: bool) -> None:
        ident = self._identity(run)
        if run.job.timeout is not None:
            run.timeout_at = run.started_mono + run.job.timeout.total_seconds()
        run.cgroup = self.containment.job_cgroup(run.run_id)  # made by its monitor, as are its limits
        run.groups = self.limiter.groups(run.run_id, run.cgroup, run.cpus)
        record_fd = None
        if record is not None:  # first: where nothing can be recorded, nothing may start
            path, info = record
            deadline = (run.started + run.job.timeout).isoformat() if run.job.timeout is not None else None
            try:
                record_fd = runrecords.create(path, {**info, "boot": self._boot, "cgroup": run.cgroup,
                                                     "contain": self.containment.kind, "deadline": deadline,
                                                     "groups": list(run.groups),
                                                     "kill_grace": self.kill_grace})
            except runrecords.RecordError as error:
                self._undo(run)
                raise NoRecord(str(error)) from None
            run.record_path = path
        try:
            self._hand_to_monitor(run, ident, record_fd, output_path, stderr_path, append, ready)
        except BaseException:
            self._undo(run)
            raise
        finally:
            if record_fd is not None:
                os.close(record_fd)
        self.runs.append(run)

    def prepare(self, run: Run) -> bool:
        """Make ``run``'s start ready ahead, in a monitor of the spawner's (onite.exec.spawner): ``run``
        is the job most likely to start next, not claimed yet, so nothing of it is on disk; ``start``
        of a run of the same id, job, owner and request takes it, any other start drops it. False
        if nothing was made ready (no monitor waits, one is ready already)."""
        if self._ready is not None or self._spawner.failed:
            return False
        cgroup = self.containment.job_cgroup(run.run_id)
        spec = self._spec(run, self._identity(run), cgroup, self.limiter.groups(run.run_id, cgroup, run.cpus), None)
        try:
            made = self._spawner.prepare(spec)
        except SpawnerGone:
            made = False
        finally:
            os.close(spec.script_fd)
        if made:
            self._ready = (run.run_id, run.job, run.owner, run.need, self.shell, self.kill_grace)
        return made

    def discard(self) -> None:
        """Drop the run made ready ahead, if any (its monitor undoes what it made)."""
        self._ready = None
        self._spawner.drop()

    def _take_ready(self, run: Run) -> bool:
        """Is the run made ready ahead ``run`` (same id, job, owner, request and settings)? Any other
        is dropped."""
        if self._ready is None:
            return False
        ready, self._ready = self._ready, None
        if ready[0] == run.run_id and ready[1] is run.job and ready[2:] == (run.owner, run.need, self.shell,
                                                                            self.kill_grace):
            return True
        self._spawner.drop()
        return False

    def _identity(self, run: Run) -> Identity | None:
        """Whose credentials ``run``'s job takes: its owner's, None where they are the driver's own
        (switching to the ids we already have changes nothing)."""
        if not self.switch_user or credentials_of(run.owner) == self._credentials:
            return None
        return run.owner

    def _spec(self, run: Run, ident: Identity | None, cgroup: str | None, groups: tuple[str, ...],
              claim: tuple | None) -> monitor.Plan:
        """The monitor's Plan of ``run``, its script in a new memfd (the caller closes it); ``claim``:
        its record, output and pipe descriptors (None: made ready ahead, ``prepare``)."""
        launch = plan(run, shell=self.shell, switch_user=self.switch_user)
        script_fd = os.memfd_create(job_label(run.name), 0)
        try:
            runrecords.write_all(script_fd, run.job.body)
            os.lseek(script_fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(script_fd)
            raise
        script = os.fsencode(f"/dev/fd/{script_fd}")
        record_fd, out, err, notify_w = claim if claim is not None else (None, None, None, None)
        return monitor.Plan(
            argv=tuple(script if part == SCRIPT else part for part in launch.argv), env=launch.env,
            cwd=launch.cwd, umask=launch.umask, uid=ident.uid if ident else None,
            gid=ident.gid if ident else None, groups=tuple(ident.groups) if ident else (),
            script_fd=script_fd, stdout_fd=out, stderr_fd=err, record_fd=record_fd,
            record_path=run.record_path or "", notify_fd=notify_w, lock_fd=self.lock_fd if claim else None,
            cgroup=cgroup, contain=self.containment.kind, kill_grace=self.kill_grace,
            limit_groups=groups, limit_steps=self.limiter.steps(run.run_id, cgroup, run.cpus),
            memory_steps=self.limiter.memory_steps(run.run_id, cgroup, run.mem),
            usage_reads=self.limiter.reads(run.run_id, cgroup))

    def _hand_to_monitor(self, run: Run, ident: Identity | None, record_fd: int | None, output_path: Path,
                         stderr_path: Path | None, append: bool, ready: bool) -> None:
        """Open the run's output files and hand the run to a monitor (onite.exec.monitor): the one made
        ready for it (``ready``), else the spawner's, else one forked here; ``run.monitor`` is the
        driver's end of it.

        Raises:
            NoRecord: the disk is full (nothing could be recorded of the run either).
            SpawnError: an output file cannot be made, or no process can be forked.
        """
        outputs = run_outputs(run, output_path, stderr_path, ident, append=append)
        out, err = outputs.__enter__()
        spec = notify_w = None
        try:
            notify_r, notify_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            record = record_fd if record_fd is not None else os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            try:
                if ready and self._go(run, (record, out, err, notify_w)):
                    pid, pidfd, child = None, None, False  # its pipe says the rest
                else:
                    spec = self._spec(run, ident, run.cgroup, run.groups, (record, out, err, notify_w))
                    pid, pidfd, child = self._spawn(spec)
            except OSError as error:
                os.close(notify_r)
                raise SpawnError(f"cannot start its monitor: {error.strerror}") from None
        finally:
            for fd in (spec.script_fd if spec else None, notify_w):
                if fd is not None:
                    os.close(fd)
            outputs.__exit__(None, None, None)
        run.monitor = MonitorLink(pid=pid, pidfd=pidfd, pipe=notify_r, child=child)

    def _go(self, run: Run, claim: tuple) -> bool:
        """Start the run made ready for ``run`` with its claim's descriptors; False if its monitor died
        meanwhile (nothing was started)."""
        record_fd, out, err, notify_w = claim
        try:
            self._spawner.go(record_fd=record_fd, record_path=run.record_path or "", stdout_fd=out, stderr_fd=err,
                             notify_fd=notify_w, lock_fd=self.lock_fd)
            return True
        except SpawnerGone:
            return False

    def _spawn(self, spec: monitor.Plan) -> tuple[int | None, int | None, bool]:
        """Hand ``spec`` to the spawner's monitors (onite.exec.spawner), where it runs, else fork its
        monitor here. Its pid and a pidfd (None, None from the spawner: its pipe says the rest), and
        whether it is this process's child.

        Raises:
            OSError: no process can be forked.
        """
        if not self._spawner.failed:
            try:
                self._spawner.spawn(spec)
                return None, None, False  # its pipe says the rest
            except SpawnerGone:
                pass  # nothing was forked: fork it here, as without a spawner
        pid = monitor.start(spec)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None  # a very old kernel: polled
        return pid, pidfd, True

    @staticmethod
    def _undo(run: Run) -> None:
        """Nothing was started: its cgroup and record go (the claim is the driver's to put back)."""
        if run.cgroup:
            contain.remove_cgroup(run.cgroup, wait=0)
        limits.remove(run.groups)
        if run.record_path:
            try:
                os.unlink(run.record_path)
            except OSError:
                pass
            run.record_path = None

    # ---- stopping --------------------------------------------------------------

    def stop(self, run: Run, why: Stop, *, by: str | None = None) -> None:
        """Begin stopping ``run``: SIGTERM to its processes now, SIGKILL after the grace period."""
        if run.stopping is None:
            run.stopping = why
            run.cancelled_by = by
        if run.kill_at is None:
            run.kill_at = self.clock.monotonic() + self.kill_grace
            self._signal(run, signal.SIGTERM)

    def kill(self, run: Run, why: Stop) -> None:
        """Kill ``run``'s processes at once (a hard stop)."""
        if run.stopping is None:
            run.stopping = why
        self._signal(run, signal.SIGKILL)

    @staticmethod
    def _signal(run: Run, sig: int) -> None:
        """Signal every process of the job: its group, and its cgroup if it has one. Before its
        monitor said it started there is no process yet: the stop is applied when it does."""
        if run.pgid is not None:
            contain.signal_group(run.pgid, sig)
        # before the job started its cgroup may hold its monitor (onite.exec.jobstart), which is not
        # the job's to stop; an adopted run's record may not say when its job started
        if run.cgroup and (run.pgid is not None or run.adopted):
            if sig == signal.SIGKILL:
                contain.kill_cgroup(run.cgroup)
            else:
                contain.signal_cgroup(run.cgroup, sig)

    def tick(self, now_mono: float) -> None:
        """Enforce time limits and kill deadlines."""
        for run in self.runs:
            if run.stopping is None and run.timeout_at is not None and now_mono >= run.timeout_at:
                self.stop(run, Stop.TIMEOUT)
            elif run.kill_at is not None and now_mono >= run.kill_at:
                self._signal(run, signal.SIGKILL)
                run.kill_at = None

    # ---- hearing from monitors -------------------------------------------------

    def reap(self) -> list[tuple[Run, Outcome]]:
        """Runs whose job has ended (or could not start), with their outcomes."""
        finished = []
        for run in self.runs:
            outcome = self._hear(run)
            if outcome is not None:
                if run.stopping == Stop.SHUTDOWN and outcome.exit_code is not None:
                    # the hard stop's SIGKILL can be neither caught nor turned into an exit code: the
                    # job ended on its own first (before the driver heard it), so it is filed, not rerun
                    run.stopping = None
                finished.append((run, stopped_outcome(outcome, run.stopping, run.cancelled_by) or outcome))
        if finished:
            done = {id(run) for run, _ in finished}
            self.runs = [run for run in self.runs if id(run) not in done]
        self._lingering = [mon for mon in self._lingering if not mon.is_done()]
        return finished

    def exited(self) -> list[Run]:
        """Runs whose job's leader exited since the last call (their monitor said so before it read and
        recorded how; ``reap`` gives their outcome once it did)."""
        exited, self._exited = self._exited, []
        return exited

    def started(self) -> list[Run]:
        """Runs whose job's interpreter started since the last call."""
        started, self._started = self._started, []
        return sorted(started, key=lambda run: run.started_mono)  # in the order they were claimed

    def _hear(self, run: Run) -> Outcome | None:
        """Read what ``run``'s monitor said; its outcome once the job ended, else None."""
        mon = run.monitor
        if mon is None:
            return Outcome(reason="it could not be started", never_started=True)
        ended = self._heard(run, mon.messages())
        if ended is None:
            if not mon.is_done():
                return None
            ended = self._heard(run, mon.messages())  # what it said just before it was done
            if ended is None:
                # the monitor is gone without a word on its pipe (adopted, or killed): the record decides
                return self.outcome_from_record(run)
        self._lingering.append(mon)  # until it has ended what the job left behind
        return ended

    def _heard(self, run: Run, messages: list[str]) -> Outcome | None:
        """Take in what a monitor said; the run's outcome if it said how the job ended."""
        ended = None
        for message in messages:
            word, _, rest = message.partition(" ")
            if word == "started" and rest.isdigit():
                self._note_start(run, int(rest))
            elif word == "usage":
                run.usage = parse_usage(rest)
            elif word == "exited":
                self._exited.append(run)
            elif word == "unenforced":
                run.unenforced = tuple(rest.split(","))
            elif word == "ended" and rest.lstrip("-").isdigit():
                ended = memory_outcome(outcome_from_status(int(rest)), run.usage, run.need)
            elif word == "failed":
                # a job that started and whose status was lost fails too: it ran
                ended = Outcome(reason=rest or "it could not be started", never_started=run.pgid is None)
            elif word == "unrecorded":  # the monitor started nothing: the driver puts the claim back
                run.unrecorded = rest or "it could not be written"
                ended = Outcome(reason=f"its run could not be recorded ({run.unrecorded}): it did not start")
        return ended

    def _note_start(self, run: Run, pid: int) -> None:
        if run.pgid is None:
            run.pgid = pid
            if not run.announced:
                run.announced = True
                self._started.append(run)
            if run.stopping is not None:  # a stop asked for before the job existed
                self._signal(run, signal.SIGKILL if run.kill_at is None else signal.SIGTERM)

    def busy(self) -> bool:
        """Runs, or monitors still ending what their job left behind."""
        return bool(self.runs or self._lingering)

    def next_deadline(self) -> float | None:
        deadlines = [t for run in self.runs for t in (run.timeout_at if run.stopping is None else None, run.kill_at)
                     if t is not None]
        return min(deadlines) if deadlines else None

    def wait_fds(self) -> list[int]:
        fds = []
        for mon in [run.monitor for run in self.runs if run.monitor is not None] + self._lingering:
            fds.extend(fd for fd in (mon.pipe, mon.pidfd) if fd is not None)
        return fds

    def needs_polling(self) -> bool:
        """True when some monitor has no pidfd to wake the driver (very old kernels), or lingers."""
        return bool(self._lingering) or any(
            run.monitor is not None and run.monitor.pidfd is None and run.monitor.pipe is None for run in self.runs)

    def runinfo(self, run: Run) -> dict:
        return {}
