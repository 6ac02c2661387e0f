"""The local executor: each job under a monitor process (onite.exec.monitor), which tells how it went on
its socket; a run adopted from a dead driver is watched by its monitor's pidfd.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

from onite.core.identity import Identity
from onite.core.names import job_label
from onite.core.runrecord import RunRecord
from onite.core.state import Outcome, Stop, memory_outcome, outcome_from_status, stopped_outcome
from onite.exec import contain, limits, monitor
from onite.exec.pam import Pam
from onite.exec.plan import SCRIPT, Plan, memory_file
from onite.exec.processes import find_run_processes, stop_leftovers, stop_processes
from onite.exec.runner import NoRecord, Run, Runner, SpawnError, job_environment, record_stop, run_outputs
from onite.spool import runrecords

MAX_WAITING = 8  # monitors kept waiting beyond the busy ones
CLOSE_WAIT = 2.0  # seconds a waiting monitor is given to exit once let go


def interpreter(body: bytes, shell: str) -> tuple[bytes, ...]:
    """The command that runs ``body``, with SCRIPT where its path goes: the interpreter its ``#!`` line names
    (the path, then at most one argument), else ``shell``."""
    if body.startswith(b"#!"):
        line = body[2:].split(b"\n", 1)[0].strip(b" \t\r")
        if line:
            program, _, arg = line.replace(b"\t", b" ").partition(b" ")
            arg = arg.strip(b" ")
            return (program, *((arg,) if arg else ()), SCRIPT)
    return (os.fsencode(shell), SCRIPT)


def credentials(identity: Identity | None = None) -> tuple[tuple[int, ...], tuple[int, ...], frozenset[int]]:
    """The real, effective and saved uids and gids, and the groups with their rights, of this process, or
    of a process that runs as ``identity``: where the two are equal, switching to ``identity`` changes nothing."""
    if identity is not None:
        return (identity.uid,) * 3, (identity.gid,) * 3, frozenset(identity.groups) | {identity.gid}
    resgid = os.getresgid()
    return os.getresuid(), resgid, frozenset(os.getgroups()) | {resgid[1]}


class Monitor:
    """The driver's end of one monitor: its socket (None: adopted, watched by its pidfd), what it said."""

    def __init__(self, sock: socket.socket | None, proc: subprocess.Popen | None = None,
                 pidfd: int | None = None, pid: int | None = None) -> None:
        self.sock, self.proc, self.pidfd = sock, proc, pidfd
        self.pid = proc.pid if proc is not None else pid
        self.idle = False  # said ``idle``: done with its run, waiting for the next
        self.gone = False  # exited (its socket's end closed), or the adopted one's process ended

    def fileno(self) -> int | None:
        """Readable when it says something or is gone (None once gone)."""
        return self.sock.fileno() if self.sock is not None else self.pidfd

    def messages(self) -> list[str]:
        """The lines it said since the last call, but ``idle`` (which sets ``self.idle``)."""
        said: list[str] = []
        while self.sock is not None:
            try:
                data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.gone = True
                self.close()
            else:
                said += [line.decode("utf-8", "replace") for line in data.rstrip(b"\n").split(b"\n")]
        if monitor.IDLE in said:
            self.idle = True
            said = [line for line in said if line != monitor.IDLE]
        return said

    def is_done(self) -> bool:
        """Done with its run: it said ``idle``, or it is gone."""
        if self.sock is None and self.pidfd is not None and select.select([self.pidfd], [], [], 0)[0]:
            self.gone = True
            self.close()
        return self.idle or self.gone

    def close(self) -> None:
        """Let it go: a monitor whose socket is closed exits once its run, if any, is over."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class MonitorPool:
    """The monitors kept waiting, one more started ahead when none waits: fresh interpreters
    (``python -E -S``, importing only the monitor), never copies of the driver."""

    def __init__(self, setup: dict) -> None:
        self.setup = setup  # how jobs are contained and limited (onite.exec.monitor.serve)
        self.waiting: list[Monitor] = []
        self.procs: list[subprocess.Popen] = []  # those started, until reaped

    def send(self, plan: Plan) -> Monitor:
        """Hand ``plan`` to a waiting monitor, or one started for it. NoRecord: the plan cannot be written;
        OSError: no monitor could be started and sent it."""
        data, fds = plan.encode()
        try:
            data_fd = memory_file("onite-plan", data)
        except OSError as err:
            raise NoRecord(f"cannot hand the run to its monitor: {err.strerror}") from None
        try:
            while True:
                fresh = not self.waiting
                mon = self.waiting.pop() if self.waiting else self._start()
                try:
                    socket.send_fds(mon.sock, [b"run"], [data_fd, *fds])
                    break
                except OSError:
                    mon.close()  # it died meanwhile: the next one
                    if fresh:
                        raise
        finally:
            os.close(data_fd)
        mon.idle = False
        if not self.waiting:
            with suppress(OSError):  # the next start tries again
                self.waiting.append(self._start())
        return mon

    def release(self, mon: Monitor) -> None:
        """A monitor done with its run: kept waiting if it said ``idle`` and not too many wait."""
        if mon.sock is not None and mon.idle and len(self.waiting) < MAX_WAITING:
            self.waiting.append(mon)
        else:
            mon.close()
        self.procs = [proc for proc in self.procs if proc.poll() is None]

    def _start(self) -> Monitor:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        boot = (f"import sys; sys.path.insert(0, {root!r}); from onite.exec.monitor import serve; "
                f"serve({theirs.fileno()}, {self.setup!r})")
        try:
            proc = subprocess.Popen([sys.executable, "-E", "-S", "-c", boot], pass_fds=(theirs.fileno(),),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.procs.append(proc)
        return Monitor(ours, proc)

    def close(self) -> None:
        """Let the waiting monitors go, and reap them (a busy one is not waited for)."""
        for mon in self.waiting:
            mon.close()
            with suppress(subprocess.TimeoutExpired):
                mon.proc.wait(timeout=CLOSE_WAIT)  # a waiting monitor is one this pool started
        self.waiting = []
        self.procs = [proc for proc in self.procs if proc.poll() is None]


class LocalRunner(Runner):
    """Starts each job under a monitor and reports how jobs ended."""

    executor = "local"

    def __init__(self, *, shell: str, kill_grace: float, switch_user: bool,
                 containment: contain.Containment | None = None, lock_fd: int | None = None,
                 limiter: limits.Limiter | None = None, pam: Pam | None = None, max_output: int | None = None) -> None:
        self.shell = shell
        self.kill_grace = kill_grace
        self.max_output = max_output
        self.switch_user = switch_user
        self.containment = containment or contain.Containment(contain.OFF, why="not asked for")
        self.lock_fd = lock_fd  # the driver lock: each monitor holds it until its first record line
        self.limiter = limiter or limits.Limiter(why="not asked for")
        self.pam = pam or Pam(why="not asked for")
        self.runs: list[Run] = []
        self._lingering: list[Monitor] = []  # monitors ending what their job left behind
        self._credentials = credentials()
        self._boot = contain.boot_id()
        self._pool = MonitorPool({"contain": self.containment.kind, "base": self.containment.base,
                                  "limiter": vars(self.limiter),  # the monitor's Slot makes it again
                                  "pam": self.pam.path if self.pam.service else None, "pam_service": self.pam.service})
        for fd in (0, 1, 2):  # /dev/null on any that is closed, so no job file takes its number
            try:
                os.fstat(fd)
            except OSError:
                os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one

    def close(self) -> None:
        self._pool.close()

    def reload(self, config) -> None:
        self.shell = config.shell
        self.kill_grace = config.kill_grace.total_seconds()
        self.max_output = config.max_output

    def record_info(self, run: Run) -> dict:
        """For recovery: the machine's boot, the containment and the time limit's end."""
        deadline = (run.started + run.job.timeout).isoformat() if run.job.timeout is not None else None
        return {"boot": self._boot, "contain": self.containment.kind, "deadline": deadline,
                "kill_grace": self.kill_grace}

    def start(self, run: Run, output_path: Path, *, append: bool, stderr_path: Path, record_fd: int) -> None:
        """Send ``run`` to a monitor and return (the monitor says when the job started)."""
        # switching to the ids the driver has already changes nothing
        ident = None if not self.switch_user or credentials(run.owner) == self._credentials else run.owner
        with run_outputs(run, output_path, stderr_path, ident, append=append) as (out, err):
            try:
                script_fd = memory_file(job_label(run.name), run.job.body)
            except OSError as error:  # a file-size limit, no memory: the driver's, not the job's
                raise NoRecord(f"cannot hand its text to its monitor: {error.strerror}") from None
            try:
                run.monitor = self._pool.send(Plan(
                    argv=interpreter(run.job.body, self.shell),
                    env=job_environment(run, switch_user=self.switch_user), cwd=run.job.cwd, umask=run.job.umask,
                    uid=ident.uid if ident else None, gid=ident.gid if ident else None,
                    groups=tuple(ident.groups) if ident else (), script_fd=script_fd, stdout_fd=out,
                    stderr_fd=err, record_fd=record_fd,
                    record_path=run.record_path or "", lock_fd=self.lock_fd, cgroup=None,
                    contain=self.containment.kind, kill_grace=self.kill_grace, max_output=self.max_output,
                    mem=run.mem, cpus=run.cpus,
                    pam_service=self.pam.service, pam_user=run.owner.name if self.pam.service else None,
                    deadline=(run.started + run.job.timeout).timestamp() if run.job.timeout is not None else None))
            except OSError as error:
                raise SpawnError(f"cannot start its monitor: {error.strerror}") from None
            finally:
                os.close(script_fd)
        self.runs.append(run)

    def stop(self, run: Run, why: Stop, *, by: str | None = None) -> None:
        """The reason goes into the run record first (whoever files the run files it as stopped), then SIGUSR2
        tells the monitor."""
        if run.stopping is not None and not (why == Stop.SHUTDOWN and run.stopping != Stop.SHUTDOWN):
            return
        run.stopping, run.cancelled_by = why, by if why == Stop.CANCEL else run.cancelled_by
        record_stop(run.record_path, why, by)  # the monitor reads it there
        if run.monitor is not None and not run.monitor.gone:
            contain.signal_pid(run.monitor.pid, signal.SIGUSR2)

    def reap(self) -> list[tuple[Run, Outcome]]:
        finished = []
        for run in self.runs:
            outcome = self._hear(run)
            if outcome is not None:
                self._first_stop(run)
                if run.stopping == Stop.SHUTDOWN and outcome.exit_code is not None:
                    # a hard stop's SIGKILL gives no exit code: the job ended on its own first, filed, not rerun
                    run.stopping = None
                finished.append((run, stopped_outcome(outcome, run.stopping, run.cancelled_by) or outcome))
        done = {run for run, _ in finished}  # a Run is hashed by its identity
        self.runs = [run for run in self.runs if run not in done]
        lingering, self._lingering = self._lingering, []
        for mon in lingering:
            mon.messages()
            self._release(mon)
        return finished

    @staticmethod
    def _first_stop(run: Run) -> None:
        """A run stopped twice (a time limit, max_output or a cancel, then a hard stop) ended for the first, as a
        recovering driver would file it: not put back in its queue to run (and write) again."""
        if run.stopping is None or not run.record_path:
            return
        rec = runrecords.read(run.record_path)
        if rec is not None and rec.stop is not None:
            run.stopping, run.cancelled_by = rec.stop, rec.stopped_by

    def _release(self, mon: Monitor) -> None:
        """A monitor whose job ended: back to the pool once done with the run, else waited for."""
        if mon.is_done():
            self._pool.release(mon)
        else:
            self._lingering.append(mon)

    def _hear(self, run: Run) -> Outcome | None:
        """Read what ``run``'s monitor said; its outcome once the job ended, else None."""
        mon = run.monitor
        ended = self._heard(run, mon.messages())
        if ended is None:
            if not mon.is_done():
                return None
            # the monitor is done without a word of the end (adopted, or killed): the record decides
            ended = self._heard(run, mon.messages()) or self.outcome_from_record(run)
        self._release(mon)
        return ended

    def _heard(self, run: Run, messages: list[str]) -> Outcome | None:
        """Take in what a monitor said; the run's outcome if it said how the job ended."""
        ended = None
        for message in messages:
            word, _, rest = message.partition(" ")
            if word == "started" and rest.isdigit():
                self._note_start(run, int(rest))
            elif word == "stop" and rest in set(Stop):
                run.stopping = run.stopping or Stop(rest)
            elif word == "usage":
                try:
                    usage = json.loads(rest)
                except ValueError:
                    usage = None
                run.usage = usage if isinstance(usage, dict) else None
            elif word == "unenforced":
                run.unenforced = tuple(rest.split(","))
            elif word == "ended" and rest.lstrip("-").isdigit():
                ended = memory_outcome(outcome_from_status(int(rest)), run.usage, run.need)
            elif word == "failed":  # a job that started and whose status was lost fails too: it ran
                ended = Outcome(reason=rest or "it could not be started", never_started=run.pgid is None)
            elif word == "unrecorded":  # the monitor started nothing: the driver puts the claim back
                run.unrecorded = rest or "it could not be written"
                ended = Outcome(reason=f"its run could not be recorded ({run.unrecorded}): it did not start")
        return ended

    def _note_start(self, run: Run, pid: int) -> None:
        if run.pgid is None:
            run.pgid = pid
            run.announced = True

    def busy(self) -> bool:
        return bool(self.runs or self._lingering)

    def wait_fds(self) -> list[int]:
        mons = [run.monitor for run in self.runs] + self._lingering
        return [fd for fd in (mon.fileno() for mon in mons) if fd is not None]

    def outcome_from_record(self, run: Run) -> Outcome:
        """How a run ended whose monitor is done with it without a word, as its run record says."""
        rec = runrecords.read(run.record_path) if run.record_path else None
        if rec is not None and rec.job_pid is not None:
            self._note_start(run, rec.job_pid)
        if rec is not None and rec.ended:
            run.usage = rec.usage
            run.stopping = None  # the record says whether it was stopped
            return rec.outcome(run.need)
        # onite's machinery failed, not the job: a retry it has left is spooled (retryable)
        if rec is not None and not rec.started_job:
            return Outcome(reason="its monitor was killed before it started the job: the job did not run",
                           retryable=True, never_started=True)
        # nobody watches what may still run of it, and a retry may follow at once: it is stopped now
        stop_leftovers(rec, self.containment, self.limiter, run.spool, run.name, run.run_id, run.pgid)
        if rec is not None and rec.exited is not None:  # killed ending what its job left: the status was kept
            run.usage, run.stopping = None, None
            return rec.kept().outcome(run.need)
        return Outcome(reason="onite's monitor of this job was killed: how the job ended is unknown", retryable=True)

    def adopt(self, run: Run, rec: RunRecord) -> bool:
        """Watch a run whose monitor outlived its driver by its pidfd; False if the monitor is not that process."""
        pid, ticks = rec.monitor_pid, rec.monitor_ticks
        if pid is None:
            return False
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return False
        if ticks is not None and contain.process_start_ticks(pid) != ticks or select.select([pidfd], [], [], 0)[0]:
            os.close(pidfd)
            return False  # the pid belongs to another process now, or it has exited (a zombie of init's)
        run.monitor = Monitor(None, pidfd=pidfd, pid=pid)
        run.pgid = rec.job_pid
        run.announced = True
        if rec.stop is not None:
            run.stopping, run.cancelled_by = rec.stop, rec.stopped_by
        self.runs.append(run)
        return True

    def recover_unrecorded(self, name: str, spool: str, run_id_ok, *, owner: int | None = None) -> str:
        if killed := stop_processes(lambda: find_run_processes(spool, name, run_id_ok), self.kill_grace):
            return f"no run record; {killed} of its processes, found by ONITE_RUN_ID, were stopped"
        return "no run record, and none of its processes was running"
