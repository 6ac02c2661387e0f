"""Running one job on this machine: as its owner, in its own session, output captured.

``plan`` (pure) decides the command line and environment; ``spawn`` starts it:

- the job text is handed over in an anonymous memory file (memfd) that the
  interpreter reads as /dev/fd/N: nothing is written to disk, bytes are
  exact, and the job's stdin stays /dev/null;
- text that starts with ``#!`` runs under that interpreter (Linux rules:
  the path, then at most one argument); anything else under ``shell``;
- when the driver is root the child drops to the owner with the standard
  library's own support, applied in this order by the kernel calls
  setgroups, setgid, setuid (``extra_groups``, ``group``, ``user``): real,
  effective and saved ids all change, so the job can never regain root;
- a new session (setsid): the job leads its own process group, which is
  what timeouts and cancels signal, and it has no controlling terminal;
- stdout and stderr go to stdout/NAME, created by the driver, owned by the
  job's user, mode 0600; a job spooled with --stderr-separate has its stderr
  in stdout/NAME@stderr instead, created the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from onite.identity import Identity
from onite.jobfile import Job
from onite.names import job_label


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


class LocalProcess:
    """A started job: its leader process, whose pid is also its process group id."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # setsid made it the leader of a new session and group
        try:
            self.pidfd: int | None = os.pidfd_open(self.pid)
        except (OSError, AttributeError):
            self.pidfd = None  # old kernel: the driver falls back to polling

    def poll(self) -> int | None:
        """The wait status once the leader has exited, else None (reaps it)."""
        if self.popen.returncode is not None:
            return self._status
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid == 0:
            return None
        self.popen.returncode = os.waitstatus_to_exitcode(status)
        self._status = status
        self.close()
        return status

    def signal_group(self, sig: int) -> bool:
        """Signal every process of the job's group; False if none is left."""
        return kill_group(self.pgid, sig)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def spawn(launch: Launch, body: bytes, output_fd: int, name: str, stderr_fd: int | None = None) -> LocalProcess:
    """Start the job (stderr to ``stderr_fd``, else with stdout). Raises SpawnError with a reason
    fit for the result record."""
    cwd = launch.cwd
    check_directory(cwd)
    script_fd = os.memfd_create(job_label(name), 0)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(script_fd, view):]
        os.lseek(script_fd, 0, os.SEEK_SET)
        script = os.fsencode(f"/dev/fd/{script_fd}")
        argv = [script if part == SCRIPT else part for part in launch.argv]
        ident = launch.identity
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output_fd,
                stderr=subprocess.STDOUT if stderr_fd is None else stderr_fd,
                cwd=cwd,
                env=launch.env,
                start_new_session=True,
                umask=launch.umask,
                pass_fds=(script_fd,),
                close_fds=True,
                restore_signals=True,
                **({"user": ident.uid, "group": ident.gid, "extra_groups": list(ident.groups)} if ident else {}),
            )
        except FileNotFoundError as err:
            missing = err.filename or argv[0]
            if missing == cwd or (isinstance(missing, str) and os.fsencode(missing) == cwd):
                raise SpawnError(f"its directory {os.fsdecode(cwd)} no longer exists") from None
            raise SpawnError(f"cannot start {os.fsdecode(argv[0])}: no such file") from None
        except PermissionError as err:
            target = err.filename if err.filename is not None else argv[0]
            raise SpawnError(f"cannot start {os.fsdecode(target)}: permission denied") from None
        except OSError as err:
            raise SpawnError(f"cannot start {os.fsdecode(argv[0])}: {err.strerror or err}") from None
    finally:
        os.close(script_fd)
    return LocalProcess(popen)


def check_directory(cwd: bytes) -> None:
    """Raises SpawnError when the job's directory is gone (a clear reason beats chdir's errno)."""
    import stat

    try:
        st = os.stat(cwd)
    except (FileNotFoundError, NotADirectoryError):
        raise SpawnError(f"its directory {os.fsdecode(cwd)} no longer exists") from None
    except OSError:
        return  # e.g. root cannot look into a root-squashed NFS home: let the start itself decide
    if not stat.S_ISDIR(st.st_mode):
        raise SpawnError(f"its directory {os.fsdecode(cwd)} is not a directory")


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
                raise SpawnError(f"cannot create its output file {path}: {err.strerror}") from None
            if marker is not None:
                try:
                    os.write(fds[-1], marker.encode())
                except OSError as err:
                    raise SpawnError(f"cannot write its output file {path}: {err.strerror}") from None
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds[0], fds[1] if len(fds) > 1 else None


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


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: tells a process from a later one that reused its pid."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def find_run_processes(spool: str, name: str, run_id_ok) -> list[int]:
    """This machine's processes of job ``name`` of ``spool`` whose ONITE_RUN_ID passes ``run_id_ok``:
    read from each process's environment as it was started (/proc/PID/environ), which every
    process of a job inherits. Processes this one may not read are skipped: a driver that is not
    root runs only its own user's jobs.
    """
    from onite.filecheck import read_up_to

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

from onite.state import Outcome, outcome_from_status, stopped_outcome


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
    process: "LocalProcess | None" = None
    external_id: str | None = None  # e.g. a Slurm job id
    timeout_at: float | None = None  # monotonic
    kill_at: float | None = None  # monotonic: SIGKILL if still alive then
    stopping: str | None = None  # "timeout", "cancel", "shutdown"
    cancelled_by: str | None = None
    queued_at: datetime | None = None  # when it entered its queue (the kernel's ctime)
    spool: str = ""  # the root of the spool it was claimed from (ONITE_JOB_SPOOL)

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


class Runner:
    """What the driver needs from an executor (LocalRunner here, SlurmRunner in onite.slurm).

    ``executor``        "local" or "slurm", recorded in results
    ``runs``            the runs it is responsible for now
    ``start(run, output_path, append, stderr_path)``   start it, or raise SpawnError with the reason
                        (``stderr_path``: the job's stderr file, used as ``run_outputs`` says)
    ``stop(run, why, by)``  begin a graceful stop ("timeout", "cancel", "shutdown")
    ``kill(run, why)``      stop at once (the driver's hard stop)
    ``tick(now_mono)``      enforce deadlines
    ``reap()``              [(run, Outcome)] for runs that ended since the last call
    ``next_deadline()``     monotonic time the driver must wake for, or None
    ``wait_fds()``          descriptors that become readable when a run may have ended
    ``runinfo(run)``        JSON-able facts recovery needs after a driver crash
    ``recover(info, grace)``  make sure a dead driver's run is gone; returns what was done
    ``recover_unrecorded(name, spool, run_id_ok, grace)``  the same for a claim of ``spool`` with no
                        run record (its driver was killed just after starting it): finds what runs
                        for job ``name`` under a run id that passes ``run_id_ok``
    ``reattach(run)``       take back a run that outlived its driver; True if it did (default: never)
    ``busy()``              True while it still has work in flight (the driver waits before exiting)
    ``needs_polling()``     True when runs have no descriptor to wait on (the driver then polls
                            every 50 ms; a runner that polls at its own pace uses next_deadline)
    ``reload(config)``      take new settings after SIGHUP
    """

    runs: list

    def busy(self) -> bool:
        return bool(self.runs)

    def needs_polling(self) -> bool:
        return False

    def reattach(self, run: Run) -> bool:
        return False

    def reload(self, config) -> None:
        pass


class LocalRunner(Runner):
    """Starts jobs as local process groups, enforces time limits, reports how they ended.

    Time limits and stops: SIGTERM to the whole group, then SIGKILL after
    ``kill_grace``. When a job's leader exits, whatever it left running in
    its group is killed too, so no stray process outlives its job and the
    slot bound means what it says.
    """

    executor = "local"

    def __init__(self, *, shell: str, kill_grace: float, switch_user: bool) -> None:
        self.shell = shell
        self.kill_grace = kill_grace
        self.switch_user = switch_user
        self.runs: list[Run] = []
        self._orphans: list[tuple[int, float]] = []  # (pgid, kill_at) of groups whose leader exited
        self._credentials = own_credentials()

    def reload(self, config) -> None:
        self.shell = config.shell
        self.kill_grace = config.kill_grace.total_seconds()

    def start(self, run: Run, output_path: Path, *, append: bool, stderr_path: Path | None = None) -> None:
        """Start ``run``. Raises SpawnError (the job is then recorded as failed)."""
        launch = plan(run, shell=self.shell, switch_user=self.switch_user)
        if launch.identity is not None and credentials_of(launch.identity) == self._credentials:
            # Switching to the ids we already have changes nothing, and asking for it
            # costs a full fork() instead of vfork() (CPython will not vfork to setuid).
            launch = replace(launch, identity=None)
        with run_outputs(run, output_path, stderr_path, launch.identity, append=append) as (out, err):
            run.process = spawn(launch, run.job.body, out, run.name, err)
        if run.job.timeout is not None:
            run.timeout_at = run.started_mono + run.job.timeout.total_seconds()
        self.runs.append(run)

    def stop(self, run: Run, why: str, *, by: str | None = None) -> None:
        """Begin stopping ``run``: SIGTERM to its group now, SIGKILL after the grace period."""
        if run.stopping is None:
            run.stopping = why
            run.cancelled_by = by
        if run.process is not None and run.kill_at is None:
            run.process.signal_group(signal.SIGTERM)
            run.kill_at = _time.monotonic() + self.kill_grace

    def kill(self, run: Run, why: str) -> None:
        """Kill ``run``'s group at once (a hard stop)."""
        if run.stopping is None:
            run.stopping = why
        if run.process is not None:
            run.process.signal_group(signal.SIGKILL)

    def tick(self, now_mono: float) -> None:
        """Enforce time limits and kill deadlines."""
        for run in self.runs:
            if run.stopping is None and run.timeout_at is not None and now_mono >= run.timeout_at:
                self.stop(run, "timeout")
            elif run.kill_at is not None and now_mono >= run.kill_at and run.process is not None:
                run.process.signal_group(signal.SIGKILL)
                run.kill_at = None
        if self._orphans:
            keep = []
            for pgid, kill_at in self._orphans:
                if now_mono >= kill_at:
                    kill_group(pgid, signal.SIGKILL)
                elif kill_group(pgid, 0):
                    keep.append((pgid, kill_at))
            self._orphans = keep

    def reap(self) -> list[tuple[Run, Outcome]]:
        """Runs whose leader has exited, with their outcomes."""
        finished = []
        for run in self.runs:
            status = run.process.poll() if run.process is not None else 0
            if status is None:
                continue
            if run.process is not None and kill_group(run.process.pgid, signal.SIGTERM):
                # the leader left children behind: they get the grace period, then SIGKILL
                self._orphans.append((run.process.pgid, _time.monotonic() + self.kill_grace))
            ended = outcome_from_status(status)
            finished.append((run, stopped_outcome(ended, run.stopping, run.cancelled_by) or ended))
        if finished:
            done = {id(run) for run, _ in finished}
            self.runs = [run for run in self.runs if id(run) not in done]
        return finished

    def busy(self) -> bool:
        """Runs, or groups whose leader exited but whose stragglers still have their grace period."""
        return bool(self.runs or self._orphans)

    def next_deadline(self) -> float | None:
        deadlines = [t for run in self.runs for t in (run.timeout_at if run.stopping is None else None, run.kill_at)
                     if t is not None]
        deadlines.extend(kill_at for _, kill_at in self._orphans)
        return min(deadlines) if deadlines else None

    def wait_fds(self) -> list[int]:
        return [run.process.pidfd for run in self.runs if run.process is not None and run.process.pidfd is not None]

    def needs_polling(self) -> bool:
        """True when some run has no pidfd to wake the driver (very old kernels)."""
        return any(run.process is not None and run.process.pidfd is None for run in self.runs)

    def runinfo(self, run: Run) -> dict:
        """What recovery needs to find this run's processes after a driver crash."""
        proc = run.process
        return {
            "pid": proc.pid if proc else None,
            "pgid": proc.pgid if proc else None,
            "start_ticks": process_start_ticks(proc.pid) if proc else None,
        }

    def recover_unrecorded(self, name: str, spool: str, run_id_ok, grace: float) -> str:
        """A claim with no run record: its processes, if any, are found by their environment."""
        killed = stop_processes(lambda: find_run_processes(spool, name, run_id_ok), grace)
        if killed:
            return f"no run record; {killed} of its processes, found by ONITE_RUN_ID, were stopped"
        return "no run record, and none of its processes was running"

    def recover(self, info: dict, grace: float) -> str:
        """A run left by a dead driver: make sure its processes are gone. Returns what was done."""
        pgid = info.get("pgid")
        if not pgid:
            return "no process"
        pid, ticks = info.get("pid"), info.get("start_ticks")
        now_ticks = process_start_ticks(pid) if pid else None
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
