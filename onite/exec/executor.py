"""Running one job on this machine: as its owner, in its own session, contained, output captured.

``plan`` (pure) decides the command line and environment; ``LocalRunner.start``
hands them to a monitor process of the job's own (onite.exec.monitor), which
starts the job and records how it ended:

- the job text is handed over in an anonymous memory file (memfd) that the
  interpreter reads as /dev/fd/N: nothing is written to disk, bytes are
  exact, and the job's stdin stays /dev/null;
- text that starts with ``#!`` runs under that interpreter (Linux rules:
  the path, then at most one argument); anything else under ``shell``;
- when the driver is root the job's process drops to the owner before it
  does anything on the owner's behalf: setgroups, setgid, setuid (real,
  effective and saved ids), then it enters the job's directory and looks up
  the interpreter with the owner's rights, never root's;
- a new session: the job leads its own process group and has no
  controlling terminal; where the machine allows, it runs in a cgroup of its
  own, so that everything it starts can be ended with it (onite.exec.contain);
- stdout and stderr go to stdout/NAME, created by the driver, owned by the
  job's user, mode 0600; a job spooled with --stderr-separate has its stderr
  in stdout/NAME@stderr instead, created the same way.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from onite.exec.identity import Identity
from onite.core.jobfile import Job
from onite.core.names import job_label


class SpawnError(Exception):
    """The job could not be started; the message is the reason recorded for it."""


class Unavailable(SpawnError):
    """The executor cannot take any job just now (the Slurm controller does not answer), and
    nothing of this job was started: it goes back to its queue and the driver waits."""


@dataclass(frozen=True)
class Launch:
    """How to start one job: its command line, environment, directory, umask and identity."""

    argv: tuple[bytes, ...]  # the last element is replaced by the script's /dev/fd path
    env: dict[bytes, bytes]
    cwd: bytes
    umask: int
    identity: Identity | None  # None: run with the driver's own credentials


SCRIPT = b"\0script\0"  # placeholder in argv for /dev/fd/N


def interpreter(body: bytes, shell: str) -> tuple[bytes, ...]:
    """The command that runs ``body``, with SCRIPT where its path goes."""
    if body.startswith(b"#!"):
        line = body[2:].split(b"\n", 1)[0].strip(b" \t\r")
        if line:
            parts = line.replace(b"\t", b" ").split(b" ", 1)
            arg = parts[1].strip(b" ") if len(parts) > 1 else b""
            return (parts[0],) + ((arg,) if arg else ()) + (SCRIPT,)
    return (os.fsencode(shell), SCRIPT)


def job_environment(run: Run, *, switch_user: bool) -> dict[bytes, bytes]:
    """The environment ``run`` starts with (pure): the one captured at submit; the owner's login
    variables when the driver is root, whatever the job file says; then onite's own three, by which
    recovery also finds the processes of a run whose record a killed driver never wrote
    (find_run_processes).
    """
    env = dict(run.job.env)
    if switch_user:
        env.update(run.owner.login_env())
    env[b"ONITE_JOB"] = run.name.encode()
    env[b"ONITE_RUN_ID"] = run.run_id.encode()
    env[b"ONITE_JOB_SPOOL"] = os.fsencode(run.spool)
    return env


def plan(run: Run, *, shell: str, switch_user: bool) -> Launch:
    """What to execute for ``run`` (pure). ``switch_user``: the driver is root."""
    return Launch(
        argv=interpreter(run.job.body, shell),
        env=job_environment(run, switch_user=switch_user),
        cwd=run.job.cwd,
        umask=run.job.umask,
        identity=run.owner if switch_user else None,
    )


def open_output(path: Path, identity: Identity | None, *, append: bool) -> int:
    """Create (or, for a retry, reopen) the job's output file, owned by its user, mode 0600.

    A fresh run replaces an older output of the same name: the old file is
    unlinked first, so a file planted in its place is never written through.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    if append:
        try:
            fd = os.open(path, flags)
            st = os.fstat(fd)
            if identity is None or st.st_uid == identity.uid:
                return fd
            os.close(fd)
        except FileNotFoundError:
            pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # an older output (or something planted): never write through it
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    if identity is not None:
        os.fchown(fd, identity.uid, identity.gid)
    os.fchmod(fd, 0o600)
    return fd


def open_outputs(stdout_path: Path, stderr_path: Path | None, identity: Identity | None, *, append: bool,
                 marker: str | None = None) -> tuple[int, int | None]:
    """``open_output`` for the job's stdout file and, when kept apart, its stderr file.

    A retry (``append``) adds to both, each after ``marker`` (a line saying
    which attempt follows), so either file read alone shows where each attempt starts.

    Raises:
        SpawnError: a file cannot be created or written (nothing is left open).
    """
    fds: list[int] = []
    try:
        for path in (stdout_path, stderr_path):
            if path is None:
                continue
            try:
                fds.append(open_output(path, identity, append=append))
            except OSError as err:
                raise _output_error(f"cannot create its output file {path}: {err.strerror}", err) from None
            if marker is not None:
                try:
                    os.write(fds[-1], marker.encode())
                except OSError as err:
                    raise _output_error(f"cannot write its output file {path}: {err.strerror}", err) from None
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds[0], fds[1] if len(fds) > 1 else None


def _output_error(message: str, err: OSError) -> SpawnError:
    """A full disk is no fault of the job's: the driver stops starting jobs (NoRecord) instead
    of failing one after another."""
    import errno

    return NoRecord(message) if err.errno in (errno.ENOSPC, errno.EDQUOT) else SpawnError(message)


def own_credentials() -> tuple[tuple[int, ...], tuple[int, ...], frozenset[int]]:
    """This process's real, effective and saved uids and gids, and the groups it has the rights of.

    The kernel grants a group's rights for the effective gid as for a
    supplementary group, so the set counts both (root often has no
    supplementary groups, where its account's group list is just its gid).
    """
    resgid = os.getresgid()
    return os.getresuid(), resgid, frozenset(os.getgroups()) | {resgid[1]}


def credentials_of(identity: Identity) -> tuple[tuple[int, ...], tuple[int, ...], frozenset[int]]:
    """What ``own_credentials`` reads in a process that runs as ``identity``."""
    return (identity.uid,) * 3, (identity.gid,) * 3, frozenset(identity.groups) | {identity.gid}


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def find_run_processes(spool: str, name: str, run_id_ok) -> list[int]:
    """This machine's processes of job ``name`` of ``spool`` whose ONITE_RUN_ID passes ``run_id_ok``:
    read from each process's environment as it was started (/proc/PID/environ), which every
    process of a job inherits. Processes this one may not read are skipped: a driver that is not
    root runs only its own user's jobs.
    """
    from onite.spool.filecheck import read_up_to

    wanted = {b"ONITE_JOB=" + name.encode(), b"ONITE_JOB_SPOOL=" + os.fsencode(spool)}
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fd = os.open(f"/proc/{entry.name}/environ", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            data = read_up_to(fd, ENVIRON_LIMIT)
        except OSError:
            continue
        finally:
            os.close(fd)
        if b"ONITE_RUN_ID=" not in data:
            continue
        variables = set(data.split(b"\0"))
        if wanted <= variables:
            run_id = next((v[len(b"ONITE_RUN_ID="):] for v in variables if v.startswith(b"ONITE_RUN_ID=")), b"")
            if run_id_ok(run_id.decode("utf-8", "replace")):
                found.append(int(entry.name))
    return found


ENVIRON_LIMIT = 8 << 20  # bytes of a process's environment read: the kernel's own limit is lower


def stop_processes(find, grace: float) -> int:
    """SIGTERM every process ``find()`` returns, then SIGKILL those still found after ``grace``
    seconds. Each is signalled through a pidfd opened while it is known to match, so a pid reused
    meanwhile is never hit; ``find`` runs again while waiting, which catches children started late.
    Returns how many processes were signalled.
    """
    signalled: set[int] = set()
    deadline = _time.monotonic() + grace
    sig = signal.SIGTERM
    while True:
        pids = find()
        if not pids:
            return len(signalled)
        for pid in pids:
            if sig == signal.SIGTERM and pid in signalled:
                continue
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                signal.pidfd_send_signal(pidfd, sig)
                signalled.add(pid)
            except OSError:
                pass
            finally:
                os.close(pidfd)
        if sig == signal.SIGKILL and _time.monotonic() > deadline + KILL_SETTLE:
            return len(signalled)
        if _time.monotonic() >= deadline:
            sig = signal.SIGKILL
        _time.sleep(0.05)


KILL_SETTLE = 5.0  # seconds after SIGKILL in which processes still found are signalled again


# ---- the local runner: every job the driver started on this machine -------------

import time as _time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from onite.exec import contain
from onite.exec import monitor
from onite.core import runrecord
from onite.core.state import Outcome, outcome_from_status, stopped_outcome


@dataclass(eq=False)
class Monitor:
    """A job's monitor process (onite.exec.monitor) as the driver watches it."""

    pid: int
    pidfd: int | None  # readable once it exits
    pipe: int | None  # what it tells the driver (None: adopted from a dead driver, no pipe)
    child: bool  # our child (we reap it), or adopted from a dead driver
    buffer: bytes = b""
    exited: bool = False

    def close(self) -> None:
        for fd in (self.pidfd, self.pipe):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.pidfd = self.pipe = None


@dataclass(eq=False)
class Run:
    """One attempt of one job, as the driver tracks it until it is recorded."""

    name: str
    job: Job
    owner: Identity
    rank: int
    run_id: str
    started: datetime
    started_mono: float
    monitor: Monitor | None = None  # local: the job's monitor
    pgid: int | None = None  # local: the job's process group (its leader's pid), once it runs
    cgroup: str | None = None  # local: the job's cgroup, if jobs get one (onite.exec.contain)
    record_path: str | None = None  # running/HOST/NAME@run
    external_id: str | None = None  # e.g. a Slurm job id
    timeout_at: float | None = None  # monotonic
    kill_at: float | None = None  # monotonic: SIGKILL if still alive then
    stopping: str | None = None  # "timeout", "cancel", "shutdown"
    cancelled_by: str | None = None
    queued_at: datetime | None = None  # when it entered its queue (the kernel's ctime)
    spool: str = ""  # the root of the spool it was claimed from (ONITE_JOB_SPOOL)
    announced: bool = False  # its start was reported to the driver (local: the monitor said "started")
    adopted: bool = False  # taken over from a driver that died

    @property
    def attempt(self) -> int:
        return self.job.attempt


def attempt_marker(run: Run) -> str:
    """The line a retry's output starts with, in each output file of the job."""
    return f"\n[onite] attempt {run.attempt} of {run.name}, {run.started:%Y-%m-%d %H:%M:%S}\n"


@contextmanager
def run_outputs(run: Run, stdout_path: Path, stderr_path: Path | None, identity: Identity | None, *,
                append: bool) -> Iterator[tuple[int, int | None]]:
    """The run's output files (``open_outputs``), open while the block runs: its stdout file and,
    when the job keeps stderr apart, its stderr file ``stderr_path``; a retry (``append``) adds to
    them after its attempt marker. A job that does not keep stderr apart has an older
    ``stderr_path`` removed, so that another job's stderr cannot pass for this run's.

    Raises:
        SpawnError: a file cannot be created, written or removed (nothing is left open).
    """
    if not run.job.stderr_separate and stderr_path is not None:
        try:
            os.unlink(stderr_path)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise SpawnError(f"cannot remove the old stderr file {stderr_path}: {err.strerror}") from None
        stderr_path = None
    out, err = open_outputs(stdout_path, stderr_path, identity, append=append,
                            marker=attempt_marker(run) if append else None)
    try:
        yield out, err
    finally:
        os.close(out)
        if err is not None:
            os.close(err)


class NoRecord(SpawnError):
    """The run record cannot be written (a full disk): nothing was started, and the driver must
    start nothing more until it can record what it starts."""


class Runner:
    """What the driver needs from an executor (LocalRunner here, SlurmRunner in onite.exec.slurm).

    ``executor``        "local" or "slurm", recorded in results
    ``writes_record``   True if ``start`` writes the run record itself (before the job can run);
                        else the driver writes it from ``runinfo`` once ``start`` returned
    ``runs``            the runs it is responsible for now
    ``start(run, output_path, append, stderr_path, record)``   start it, or raise SpawnError with
                        the reason (``record``: the run record's path and first line)
    ``stop(run, why, by)``  begin a graceful stop ("timeout", "cancel", "shutdown")
    ``kill(run, why)``      stop at once (the driver's hard stop)
    ``tick(now_mono)``      enforce deadlines
    ``reap()``              [(run, Outcome)] for runs that ended since the last call
    ``started()``           runs whose start was confirmed since the last call (for the log)
    ``next_deadline()``     monotonic time the driver must wake for, or None
    ``wait_fds()``          descriptors that become readable when a run may have changed
    ``runinfo(run)``        JSON-able facts recovery needs after a driver crash
    ``recover(info, grace)``  make sure a dead driver's run (an old-format record) is gone
    ``recover_unrecorded(name, spool, run_id_ok, grace)``  the same for a claim of ``spool`` with no
                        run record, by the job's environment
    ``reattach(run)``       take back a run that outlived its driver; True if it did (default: never)
    ``busy()``              True while it still has work in flight (the driver waits before exiting)
    ``needs_polling()``     True when runs have no descriptor to wait on (the driver then polls
                            every 50 ms; a runner that polls at its own pace uses next_deadline)
    ``reload(config)``      take new settings after SIGHUP
    """

    runs: list
    writes_record = False

    def busy(self) -> bool:
        return bool(self.runs)

    def needs_polling(self) -> bool:
        return False

    def reattach(self, run: Run) -> bool:
        return False

    def reload(self, config) -> None:
        pass

    def started(self) -> list[Run]:
        return []


class LocalRunner(Runner):
    """Starts each job under a monitor of its own (onite.exec.monitor), enforces time limits, reports
    how jobs ended.

    A time limit or a stop is SIGTERM to every process of the job (its group, and its cgroup
    where jobs have one), then SIGKILL after ``kill_grace``. When a job's leader exits, its monitor
    ends whatever it left running (onite.exec.contain), so no stray process outlives its job and the slot
    bound means what it says; the driver waits for those monitors before it exits.
    """

    executor = "local"
    writes_record = True

    def __init__(self, *, shell: str, kill_grace: float, switch_user: bool,
                 containment: contain.Containment | None = None, lock_fd: int | None = None) -> None:
        self.shell = shell
        self.kill_grace = kill_grace
        self.switch_user = switch_user
        self.containment = containment or contain.Containment(contain.OFF, why="not asked for")
        self.lock_fd = lock_fd  # the driver lock: each monitor holds it until its first record line
        self.runs: list[Run] = []
        self._lingering: list[Monitor] = []  # monitors ending what their job left behind
        self._started: list[Run] = []
        self._credentials = own_credentials()
        self._boot = boot_id()
        _occupy_standard_descriptors()

    def reload(self, config) -> None:
        self.shell = config.shell
        self.kill_grace = config.kill_grace.total_seconds()

    # ---- starting --------------------------------------------------------------

    def start(self, run: Run, output_path: Path, *, append: bool, stderr_path: Path | None = None,
              record: tuple[str, dict] | None = None) -> None:
        """Start ``run`` under its monitor; returns at once (the monitor reports the start).

        Raises:
            SpawnError: its output files cannot be made (the job is recorded as failed).
            NoRecord: its run record cannot be written: nothing was started.
        """
        launch = plan(run, shell=self.shell, switch_user=self.switch_user)
        ident = launch.identity
        if ident is not None and credentials_of(ident) == self._credentials:
            ident = None  # switching to the ids we already have changes nothing
        if run.job.timeout is not None:
            run.timeout_at = run.started_mono + run.job.timeout.total_seconds()
        run.cgroup = self.containment.job_cgroup(run.run_id)
        record_fd = None
        if record is not None:  # first: where nothing can be recorded, nothing may start
            path, info = record
            deadline = (run.started + run.job.timeout).isoformat() if run.job.timeout is not None else None
            try:
                record_fd = runrecord.create(path, {**info, "boot": self._boot, "cgroup": run.cgroup,
                                                     "contain": self.containment.kind, "deadline": deadline,
                                                     "kill_grace": self.kill_grace})
            except runrecord.RecordError as error:
                self._undo(run)
                raise NoRecord(str(error)) from None
            run.record_path = path
        try:
            self._fork_monitor(run, launch, ident, record_fd, output_path, stderr_path, append)
        except BaseException:
            self._undo(run)
            raise
        finally:
            if record_fd is not None:
                os.close(record_fd)
        self.runs.append(run)

    def _fork_monitor(self, run: Run, launch: Launch, ident: Identity | None, record_fd: int | None,
                      output_path: Path, stderr_path: Path | None, append: bool) -> int:
        """Open the run's output files and fork its monitor (onite.exec.monitor); the monitor's pid.

        Raises:
            NoRecord: the disk is full (nothing could be recorded of the run either).
            SpawnError: an output file cannot be made, or no process can be forked.
        """
        outputs = run_outputs(run, output_path, stderr_path, ident, append=append)
        out, err = outputs.__enter__()
        script_fd = notify_w = None
        try:
            script_fd = os.memfd_create(job_label(run.name), 0)
            _write_all(script_fd, run.job.body)
            os.lseek(script_fd, 0, os.SEEK_SET)
            script = os.fsencode(f"/dev/fd/{script_fd}")
            notify_r, notify_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            spec = monitor.Plan(
                argv=tuple(script if part == SCRIPT else part for part in launch.argv), env=launch.env,
                cwd=launch.cwd, umask=launch.umask, uid=ident.uid if ident else None,
                gid=ident.gid if ident else None, groups=tuple(ident.groups) if ident else (),
                script_fd=script_fd, stdout_fd=out, stderr_fd=err,
                record_fd=record_fd if record_fd is not None else os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC),
                record_path=run.record_path or "", notify_fd=notify_w, lock_fd=self.lock_fd,
                cgroup=run.cgroup, contain=self.containment.kind, kill_grace=self.kill_grace)
            try:
                pid = monitor.start(spec)
            except OSError as error:
                os.close(notify_r)
                raise SpawnError(f"cannot start its monitor: {error.strerror}") from None
        finally:
            for fd in (script_fd, notify_w):
                if fd is not None:
                    os.close(fd)
            outputs.__exit__(None, None, None)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None  # a very old kernel: polled
        run.monitor = Monitor(pid=pid, pidfd=pidfd, pipe=notify_r, child=True)
        return pid

    @staticmethod
    def _undo(run: Run) -> None:
        """Nothing was started: its cgroup and record go (the claim is the driver's to put back)."""
        if run.cgroup:
            contain.remove_cgroup(run.cgroup, wait=0)
        if run.record_path:
            try:
                os.unlink(run.record_path)
            except OSError:
                pass
            run.record_path = None

    # ---- stopping --------------------------------------------------------------

    def stop(self, run: Run, why: str, *, by: str | None = None) -> None:
        """Begin stopping ``run``: SIGTERM to its processes now, SIGKILL after the grace period."""
        if run.stopping is None:
            run.stopping = why
            run.cancelled_by = by
        if run.kill_at is None:
            run.kill_at = _time.monotonic() + self.kill_grace
            self._signal(run, signal.SIGTERM)

    def kill(self, run: Run, why: str) -> None:
        """Kill ``run``'s processes at once (a hard stop)."""
        if run.stopping is None:
            run.stopping = why
        self._signal(run, signal.SIGKILL)

    @staticmethod
    def _signal(run: Run, sig: int) -> None:
        """Signal every process of the job: its group, and its cgroup if it has one. Before its
        monitor said it started there is no process yet: the stop is applied when it does."""
        if run.pgid is not None:
            kill_group(run.pgid, sig)
        if run.cgroup:
            if sig == signal.SIGKILL:
                contain.kill_cgroup(run.cgroup)
            else:
                contain.signal_cgroup(run.cgroup, sig)

    def tick(self, now_mono: float) -> None:
        """Enforce time limits and kill deadlines."""
        for run in self.runs:
            if run.stopping is None and run.timeout_at is not None and now_mono >= run.timeout_at:
                self.stop(run, "timeout")
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
                finished.append((run, stopped_outcome(outcome, run.stopping, run.cancelled_by) or outcome))
        if finished:
            done = {id(run) for run, _ in finished}
            self.runs = [run for run in self.runs if id(run) not in done]
        self._lingering = [mon for mon in self._lingering if not self._exited(mon)]
        return finished

    def started(self) -> list[Run]:
        """Runs whose job's interpreter started since the last call."""
        started, self._started = self._started, []
        return sorted(started, key=lambda run: run.started_mono)  # in the order they were claimed

    def _hear(self, run: Run) -> Outcome | None:
        """Read what ``run``'s monitor said; its outcome once the job ended, else None."""
        mon = run.monitor
        if mon is None:
            return Outcome(reason="it could not be started")
        ended: Outcome | None = None
        for message in self._messages(mon):
            word, _, rest = message.partition(" ")
            if word == "started" and rest.isdigit():
                self._note_start(run, int(rest))
            elif word == "ended" and rest.lstrip("-").isdigit():
                ended = outcome_from_status(int(rest))
            elif word == "failed":
                ended = Outcome(reason=rest or "it could not be started")
        if ended is not None:
            self._lingering.append(mon)
            return ended
        if not self._exited(mon):
            return None
        # the monitor is gone without a word on its pipe (adopted, or killed): the record decides
        return self.outcome_from_record(run)

    def _note_start(self, run: Run, pid: int) -> None:
        if run.pgid is None:
            run.pgid = pid
            if not run.announced:
                run.announced = True
                self._started.append(run)
            if run.stopping is not None:  # a stop asked for before the job existed
                self._signal(run, signal.SIGKILL if run.kill_at is None else signal.SIGTERM)

    def outcome_from_record(self, run: Run) -> Outcome:
        """How a run whose monitor has exited ended, as its run record says."""
        rec = runrecord.read(run.record_path) if run.record_path else None
        if rec is not None and rec.job_pid is not None:
            self._note_start(run, rec.job_pid)
        if rec is not None and rec.status is not None:
            return outcome_from_status(rec.status)
        if rec is not None and rec.failed is not None:
            return Outcome(reason=rec.failed)
        self._signal(run, signal.SIGKILL)  # nobody watches what may still run of it
        return Outcome(reason="onite's monitor of this job was killed: how the job ended is unknown")

    @staticmethod
    def _messages(mon: Monitor) -> list[str]:
        if mon.pipe is None:
            return []
        data = b""
        while True:
            try:
                chunk = os.read(mon.pipe, 4096)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:  # the monitor closed it: it exited
                os.close(mon.pipe)
                mon.pipe = None
                break
            data += chunk
        mon.buffer += data
        lines = mon.buffer.split(b"\n")
        mon.buffer = lines.pop()
        return [line.decode("utf-8", "replace") for line in lines]

    @staticmethod
    def _exited(mon: Monitor) -> bool:
        """Has the monitor process exited? (A child of ours is reaped here.)"""
        if mon.exited:
            return True
        if mon.child:
            try:
                pid, _ = os.waitpid(mon.pid, os.WNOHANG)
            except ChildProcessError:
                pid = mon.pid
            if pid == 0:
                return False
        elif mon.pidfd is not None:
            import select

            if not select.select([mon.pidfd], [], [], 0)[0]:
                return False
        else:
            try:
                os.kill(mon.pid, 0)
                return False
            except ProcessLookupError:
                pass
            except PermissionError:
                return False
        mon.exited = True
        mon.close()
        return True

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

    # ---- after a driver crash --------------------------------------------------

    def adopt(self, run: Run, rec: runrecord.RunRecord) -> bool:
        """Take over a run whose monitor outlived its driver: watch the monitor, enforce the time
        limit, honour cancels. False if the monitor is not that process any more."""
        pid, ticks = rec.monitor_pid, rec.monitor_ticks
        if pid is None:
            return False
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return False
        import select

        if ticks is not None and monitor.process_start_ticks(pid) != ticks or select.select([pidfd], [], [], 0)[0]:
            os.close(pidfd)
            return False  # the pid belongs to another process now, or it has exited (a zombie of init's)
        run.monitor = Monitor(pid=pid, pidfd=pidfd, pipe=None, child=False)
        run.pgid = rec.job_pid
        run.cgroup = rec.get("cgroup") if isinstance(rec.get("cgroup"), str) else None
        run.adopted = run.announced = True
        deadline = rec.get("deadline")
        if isinstance(deadline, str):
            try:
                left = (datetime.fromisoformat(deadline) - datetime.now().astimezone()).total_seconds()
                run.timeout_at = _time.monotonic() + left
            except (ValueError, TypeError):
                pass
        self.runs.append(run)
        return True

    def recover_unrecorded(self, name: str, spool: str, run_id_ok, grace: float) -> str:
        """A claim with no run record: its processes, if any, are found by their environment."""
        killed = stop_processes(lambda: find_run_processes(spool, name, run_id_ok), grace)
        if killed:
            return f"no run record; {killed} of its processes, found by ONITE_RUN_ID, were stopped"
        return "no run record, and none of its processes was running"

    def recover(self, info: dict, grace: float) -> str:
        """A run of an older onite (a version-1 record: no monitor) left by a dead driver: make
        sure its processes are gone. Returns what was done."""
        pgid = info.get("pgid")
        if not isinstance(pgid, int) or pgid <= 1:
            return "no process"
        pid, ticks = info.get("pid"), info.get("start_ticks")
        now_ticks = monitor.process_start_ticks(pid) if isinstance(pid, int) and pid > 1 else None
        if now_ticks is not None and ticks is not None and now_ticks != ticks:
            return "its processes were gone (the pid is someone else's now)"
        if now_ticks is None and not kill_group(pgid, 0):
            return "its processes were gone"
        kill_group(pgid, signal.SIGTERM)
        deadline = _time.monotonic() + grace
        while _time.monotonic() < deadline and kill_group(pgid, 0):
            _time.sleep(0.05)
        kill_group(pgid, signal.SIGKILL)
        return "its processes were killed"


def _occupy_standard_descriptors() -> None:
    """Open /dev/null on whichever of descriptors 0, 1 and 2 is closed (a driver started with its
    stdin closed): otherwise a job's script or output file could get one of those numbers, and the
    job's own stdin, stdout and stderr would take its place."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one (those below are open)


def boot_id() -> str:
    """This boot of the machine: a record from another boot describes processes that are gone."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
