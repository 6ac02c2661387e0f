"""A job's monitor: the process that starts one job, waits for it and records how it ended.

Each running job has a monitor: one forked by the driver's spawner
(onite.exec.spawner, ahead of the job: ``prepare``, then ``run`` for each Plan
that comes, one run after another) or, where no spawner runs, by the driver
for that job alone (``start``), as Slurm's slurmstepd
and podman's conmon stand between their daemon and the job: the monitor,
not the driver, is the job's parent, so the job's exit status outlives the
driver. It never executes anything itself; in order, it

1. leaves the driver's session, drops the signals meant for the driver,
   and closes every descriptor it does not need;
2. appends its ``monitor`` line (pid and start time) to the run record
   (onite.core.runrecord), then closes the driver lock it inherited: until that
   line exists no other driver can take the lock, so a claim without it
   was never started (if the line cannot be written, it starts nothing and
   tells the driver: ``unrecorded``); then makes the job's cgroups and sets its limits
   (onite.exec.contain, onite.exec.limits: the record names them already),
   and tells the driver which limits it could not set (a monitor made ready
   ahead, ``ready``, did this before its run was claimed);
3. starts the job's process (onite.exec.jobstart): born in the job's
   cgroups, in a new session, with its output files as stdout and stderr,
   it drops to the job's owner (supplementary groups, gid, uid: real,
   effective and saved) and executes its interpreter in the job's
   directory, which the monitor entered with the owner's rights: nothing is
   opened, entered or looked up as root on the owner's behalf
   (docs/security.md);
4. records ``job`` once the interpreter runs (or ``failed`` with the
   reason the owner would have got), and tells the driver over a pipe;
5. waits for the job's leader, tells the driver it ``exited`` (its slot is
   free), appends ``ended`` with its wait status and what it used, tells the
   driver, then ends whatever the job left behind (onite.exec.contain): TERM,
   ``kill_grace``, KILL;
6. is done with the run once its ``ended`` line is on disk (on a full disk
   it retries until it is, or until the driver has filed the job and removed
   the record): it closes the run's descriptors, then exits, or (forked by
   the spawner) waits for another run (onite.exec.spawner).

The code here runs after fork() in a copy of the spawner (or of the driver): it uses only
modules imported before the fork (tests/test_layers.py), never the driver's
objects' locks, and leaves with os._exit so none of the driver's cleanup runs.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from datetime import datetime

from onite.exec import contain, jobend, jobstart, limits

@dataclass(frozen=True)
class Plan:
    """Everything the monitor needs, decided by the driver before the fork."""

    argv: tuple[bytes, ...]  # argv[0] is the program; SCRIPT_FD's /dev/fd path already substituted
    env: dict[bytes, bytes]
    cwd: bytes
    umask: int
    uid: int | None  # None: keep the driver's credentials
    gid: int | None
    groups: tuple[int, ...]
    script_fd: int  # the memfd holding the job text, read by the interpreter as /dev/fd/N
    stdout_fd: int
    stderr_fd: int | None  # None: stderr goes with stdout
    record_fd: int  # the run record, opened O_APPEND
    record_path: str
    notify_fd: int  # the write end of the driver's pipe
    lock_fd: int | None  # the driver lock descriptor this process inherited (closed after step 2)
    cgroup: str | None
    contain: str  # onite.exec.contain kind
    kill_grace: float
    limit_groups: tuple[str, ...] = ()  # cgroup v1 groups holding its limits, joined too (onite.exec.limits)
    limit_steps: tuple = ()  # its groups and CPU limit, before the fork (onite.exec.limits.Limiter.steps)
    memory_steps: tuple = ()  # its memory limit, after it (onite.exec.limits.Limiter.memory_steps)
    usage_reads: tuple = ()  # the files what it used is read from (onite.exec.limits.Limiter.reads)


def start(plan: Plan) -> int:
    """Fork the monitor of one job; returns its pid in the driver (the child never returns)."""
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        code = run(plan)
    except BaseException:  # noqa: BLE001 - nothing may escape into the copy of the driver
        code = 70
        if os.environ.get("ONITE_DEBUG_MONITOR"):
            import traceback
            with open(os.environ["ONITE_DEBUG_MONITOR"], "a") as f:
                traceback.print_exc(file=f)
    finally:
        os._exit(code)


# ---- the monitor ---------------------------------------------------------------------


def prepare(contained: bool) -> None:
    """Step 1 but for the descriptors: leave the driver's session, drop the driver's signals, and
    (``contained``) become the reaper of the job's orphans. A monitor of the spawner's
    (onite.exec.spawner) does this once, before it waits for its first Plan."""
    os.setsid()  # a Ctrl-C at the driver's terminal is not for the jobs
    signal.set_wakeup_fd(-1)
    # the driver's signals are caught and dropped, not ignored: a job's process inherits an ignored
    # signal across its exec, a caught one comes back to its default there (onite.exec.jobstart)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGPIPE):
        signal.signal(sig, _dropped)
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:
                signal.signal(sig, _dropped)
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())  # and a job inherits the monitor's (empty) mask
    if contained:
        contain.set_subreaper()  # orphans of the job come to us, not to init


def _dropped(signum, frame) -> None:
    """A signal meant for the driver: the monitor goes on."""


@dataclass(frozen=True)
class Ready:
    """What a monitor made ready ahead of a run (``ready``): the limits it could not set, and the
    cgroups it joined (onite.exec.jobstart.join)."""

    missed: list[str]
    joined: tuple[list[str], str]


def ready(plan: Plan) -> Ready:
    """Make ready ahead what the start of a run needs before its process exists (onite.exec.spawner:
    while the job before it runs, so that its start waits for none of it): its cgroups made, the
    limits set before the fork, and this monitor in its groups. Nothing of the run is on disk yet:
    ``unready`` undoes it if the run is not started, and the driver removes what a monitor killed
    meanwhile leaves (empty folders)."""
    if plan.cgroup:
        contain.make_cgroup(plan.cgroup)
    missed = limits.apply(plan.limit_steps)
    return Ready(missed, jobstart.join(plan))


def unready(plan: Plan, made: Ready) -> None:
    """The run made ready is not started: leave its cgroups, and remove them."""
    jobstart.leave(made.joined[0])
    jobend.remove_groups(plan)


def run(plan: Plan, *, prepared: bool = False, keep: frozenset[int] = frozenset(), made: Ready | None = None) -> int:
    """Steps 1 to 6 in this process (a monitor); the exit code: 0 when the run is over and nothing of
    it is left, 1 when something the job left could not be ended (this monitor must not serve
    another run). ``prepared``: ``prepare`` was called; ``keep``: descriptors of the monitor's own
    (its spawner's socket) that step 1 leaves open; ``made``: what ``ready`` made ahead for it.

    Every descriptor of the run is closed when this returns: the driver hears the end of the run's
    pipe when the monitor is done with it, whether it then exits or serves the next run."""
    if not prepared:
        prepare(plan.contain != contain.OFF)
    held = {fd for fd in (plan.record_fd, plan.notify_fd, plan.script_fd, plan.stdout_fd, plan.stderr_fd,
                          plan.lock_fd) if fd is not None}
    try:
        return _monitor(plan, keep, held, made)
    finally:
        for fd in held:
            os.close(fd)


def _monitor(plan: Plan, own: frozenset[int], held: set[int], made: Ready | None) -> int:
    """Steps 1 to 6; ``held``: the run's descriptors still open (those closed here are taken out)."""
    _close_all_but(held | own)
    pid = os.getpid()
    unwritten = _record_error(plan, {"event": "monitor", "pid": pid, "ticks": _start_ticks(pid)})
    if unwritten is not None:
        # recovery takes a record without this line for a run that never started: so it must not
        if made is not None:
            unready(plan, made)
        _tell(plan, f"unrecorded {unwritten}")
        return 0
    if plan.lock_fd is not None:
        held.discard(plan.lock_fd)
        os.close(plan.lock_fd)
    if made is None:
        if plan.cgroup:
            contain.make_cgroup(plan.cgroup)  # the record names it already: recovery finds it, made or not
        made = Ready(limits.apply(plan.limit_steps), jobstart.join(plan))
    missed = made.missed
    job, report = jobstart.start(plan, made.joined)
    for fd in (plan.script_fd, plan.stdout_fd, plan.stderr_fd):
        if fd is not None:
            held.discard(fd)
            os.close(fd)
    if job is None:
        return _failed(plan, jobstart.reason(report, plan))
    _record(plan, {"event": "job", "pid": job})
    missed_memory, over = limits.apply_memory(plan.memory_steps)  # this monitor has left the job's groups
    if over:
        jobend.signal_all(plan, job, signal.SIGKILL)
    if missed or missed_memory:
        _tell(plan, "unenforced " + ",".join(missed_memory + missed))
    _tell(plan, f"started {job}")
    info = jobend.wait_for(job)
    if info is not None:
        _tell(plan, "exited")  # its slot is free now: the next job starts while its end is read and recorded
    if info is None:
        _record_end(plan, {"event": "failed", "reason": LOST, "at": _now()}, f"failed {LOST}")
        return 0 if jobend.clean_up(plan, job, pinned=False) else 1
    status, reaped = jobend.wait_status(info), False
    left = jobend.left_running(plan, job, pinned=True)
    used = limits.usage(plan.usage_reads)  # read before its cgroups go: said with how it ended
    if not left and not _complete(used):  # only its leader's rusage says what it used: reaped now
        used, reaped = _usage(plan, used, jobend.reap_leader(job)), True
    else:
        used = _usage(plan, used, None)
    if over:  # killed here for its memory, not by the kernel: counted as the kernel's kills are
        used["oom"] = used.get("oom", 0) + 1
    _record_end(plan, {"event": "ended", "status": status, "at": _now(), "usage": used},
                "usage " + json.dumps(used, separators=(",", ":")), f"ended {status}")
    try:
        if not left:
            jobend.remove_groups(plan)
            return 0
        return 0 if jobend.clean_up(plan, job, pinned=True) else 1
    finally:
        if not reaped:
            jobend.reap_leader(job)  # only now: its pid, group and session were the job's until here


_TICKS: dict[int, int | None] = {}  # this monitor's start time: read once, however many runs it serves


def _start_ticks(pid: int) -> int | None:
    if pid not in _TICKS:
        _TICKS.clear()  # a copy forked from a process that had read its own
        _TICKS[pid] = contain.process_start_ticks(pid)
    return _TICKS[pid]


def _complete(used: dict) -> bool:
    """Do its cgroups say all a result records of what a job used?"""
    return "peak_mem" in used and "cpu" in used


def _usage(plan: Plan, used: dict, rusage) -> dict:
    """What the job used: ``used``, from its cgroups (onite.exec.limits.usage), else from the rusage
    of its leader."""
    if not _complete(used):
        for key, value in (limits.rusage_usage(rusage) if rusage is not None else {}).items():
            used.setdefault(key, value)
        used["source"] = "rusage" if not plan.limit_groups else "cgroup+rusage"
    else:
        used["source"] = "cgroup"
    return used


LOST = "its exit status was lost (it was reaped by another process)"


def _failed(plan: Plan, reason: str) -> int:
    """The job's process could not be started: say why, remove its emptied cgroups."""
    _record_end(plan, {"event": "failed", "reason": reason, "at": _now()}, f"failed {reason}")
    jobend.remove_groups(plan)
    return 0


# ---- talking to the record and the driver ------------------------------------------


def _record(plan: Plan, event: dict) -> bool:
    return _record_error(plan, event) is None


def _record_error(plan: Plan, event: dict) -> str | None:
    """Append ``event`` to the run record; None, or why it could not be written."""
    try:
        os.write(plan.record_fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())
        return None
    except OSError as err:
        return err.strerror or str(err)


def _record_end(plan: Plan, event: dict, *message: str) -> None:
    """Record how the job ended, then tell the driver (the lines of ``message`` at once: one wake-up).
    On a full disk keep trying, once a
    second, until the line is written or the driver has filed the job (the record is unlinked):
    until one of them, this process is what keeps the job's exit status."""
    written = _record(plan, event)
    _tell(plan, *message)
    while not written:
        try:
            if os.fstat(plan.record_fd).st_nlink == 0:
                return
        except OSError:
            return
        time.sleep(1.0)
        written = _record(plan, event)


def _tell(plan: Plan, *lines: str) -> None:
    """Write ``lines`` to the driver's pipe in one write (one line each, whatever they hold)."""
    try:
        os.write(plan.notify_fd, "".join(line.replace("\n", " ") + "\n" for line in lines).encode("utf-8", "replace"))
    except OSError:
        pass  # the driver is gone: the record says it all


def _now() -> str:
    return datetime.now().astimezone().isoformat()


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor from 3 up but ``keep``: one close_range per gap between kept ones."""
    low = 3
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = max(low, fd + 1)
    os.closerange(low, _max_fd())


_MAX_FD: int | None = None  # this process's descriptor limit, read once: a monitor serves many runs


def _max_fd() -> int:
    global _MAX_FD
    if _MAX_FD is None:
        try:
            _MAX_FD = os.sysconf("SC_OPEN_MAX")
        except (ValueError, OSError):
            _MAX_FD = 65536
    return _MAX_FD
