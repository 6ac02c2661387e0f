"""A job's monitor: the process that starts a job, waits for it and records how it ended.

The monitor, not the driver, is the job's parent, so how a job ended outlives the driver: a fresh
interpreter (``python -E -S``) kept by onite.exec.local, serving one Plan after another (the order of
its record lines: docs/internals.md, "Exactly once"). Its messages to the driver are the lines of one
datagram: ``started``, ``unenforced``, ``stop``, ``usage``, ``ended``, ``failed``, ``unrecorded``, ``idle``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import time
from dataclasses import replace
from datetime import datetime

from onite.exec import contain, jobend, jobstart, limits, pam
from onite.exec.plan import FD_FIELDS, Plan, receive

MONITOR_RUNS = 1000  # runs one monitor serves before it exits (a bound on what it may have leaked)
IDLE = "idle"
KILL_AGAIN = 0.05  # seconds between KILLs of a job that lingers after the first
STOPS = ("timeout", "cancel", "shutdown", "output")  # onite.core.state.Stop, which this process does not import
OUTPUT_CHECK = 0.25  # seconds between two looks at how much a job limited by max_output has written
LOST = "its exit status was lost (it was reaped by another process)"


def serve(fd: int, setup: dict) -> None:
    """Run each Plan the driver sends on socket ``fd``, saying ``idle`` after each, until the driver's end
    is closed or a run left something it could not end. ``setup``: from onite.exec.local.LocalRunner."""
    sock = socket.socket(fileno=fd)
    prepare(setup["contain"] != contain.OFF or bool(setup["pam"]))  # a job started in a PAM session is an orphan
    if setup["pam"]:
        pam.load(setup["pam"], setup["pam_service"])  # ahead of the first run; a run that cannot open its session fails
    slot = Slot(setup)
    try:
        for _ in range(MONITOR_RUNS):
            plan = receive(sock)
            if plan is None or run(slot.take(plan), sock) != 0 or jobend.children():
                return  # a child left: a leader its owner's tracer still holds, which no next run may meet
            slot = Slot(setup)  # made and joined before it says it waits: off the next job's start
            if not _tell(sock, IDLE):
                return
    finally:
        slot.release()


class Slot:
    """The cgroups of this monitor's next job, made and joined while it waits: a join waits for an RCU grace
    period (milliseconds), kept off the path from one job's end to the next one's start. A CPU limit's
    group, which only one job asks for, is joined as that job starts."""

    count = 0

    def __init__(self, setup: dict) -> None:
        Slot.count += 1
        self.name = f"{contain.SLOT}{os.getpid()}-{Slot.count}"
        self.limiter = limits.Limiter(**setup["limiter"])
        cgroup = f"{setup['base']}/{self.name}" if setup["contain"] == contain.CGROUP2 and setup["base"] else None
        self.cgroup = cgroup if cgroup and contain.make_cgroup(cgroup) else None  # else: the subreaper contains
        groups = [path for path in self.limiter.groups(self.name, self.cgroup, None) if contain.make_cgroup(path)]
        limits.apply(self.limiter.pids_steps(self.name, self.cgroup, 1))  # set while the group is idle: room for us
        self.joined = jobstart.join(((self.cgroup,) if self.cgroup else ()) + tuple(groups))

    def take(self, plan: Plan) -> Plan:
        """``plan`` with the cgroups, limits and reads of this slot for its request."""
        name, cgroup, lim = self.name, self.cgroup, self.limiter
        self.joined, joined = ([], ""), self.joined  # the run's now: its clean-up removes them
        return replace(plan, cgroup=cgroup, limit_groups=lim.groups(name, cgroup, plan.cpus), joined=joined,
                       limit_steps=lim.steps(name, cgroup, plan.cpus), pids_steps=lim.pids_steps(name, cgroup, 0),
                       memory_steps=lim.memory_steps(name, cgroup, plan.mem), usage_reads=lim.reads(name, cgroup))

    def release(self) -> None:
        """As this monitor ends: out of the slot's cgroups, and they go."""
        paths, _ = self.joined
        jobstart.leave(paths)
        for path in reversed(paths):
            contain.remove_cgroup(path, wait=0)


def prepare(contained: bool) -> None:
    """Drop the driver's signals, and (``contained``) reap the job's orphans."""
    # caught and dropped, not ignored: an ignored signal would stay ignored across the job's exec
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGUSR2}:
        try:
            if sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGPIPE) \
                    or signal.getsignal(sig) is signal.SIG_IGN:
                signal.signal(sig, _ignore)
        except (OSError, ValueError):
            pass
    _WAKE.extend(os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC))
    signal.set_wakeup_fd(_WAKE[1], warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, _ignore)  # only wakes ``_watch``, through the wakeup pipe
    signal.signal(signal.SIGUSR2, _asked)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())  # and a job inherits the monitor's (empty) mask
    if contained:
        contain.set_subreaper()  # orphans of the job come to us, not to init


_ASKED: list[int] = []  # SIGUSR2 came: a driver asks this monitor to stop its job (the run record says why)
_WAKE: list[int] = []  # the pipe SIGCHLD and SIGUSR2 write to, so that ``_watch`` wakes for them


def _ignore(signum, frame) -> None:
    pass


def _asked(signum, frame) -> None:
    _ASKED.append(signum)


def run(plan: Plan, sock: socket.socket) -> int:
    """One run, told on ``sock``: 0 when nothing of it is left, 1 when something could not be ended."""
    held = {getattr(plan, name) for name in FD_FIELDS} - {None}
    try:
        _close_all_but(held | {sock.fileno(), *_WAKE})
        return _monitor(plan, sock, held)
    finally:
        for fd in held:
            os.close(fd)


def _monitor(plan: Plan, sock: socket.socket, held: set[int]) -> int:
    """``run``; ``held``: the run's descriptors still open (those closed here are taken out)."""
    pid = os.getpid()
    unwritten = _record(plan, {"event": "monitor", "pid": pid, "ticks": contain.process_start_ticks(pid),
                               "cgroup": plan.cgroup, "groups": list(plan.limit_groups)})
    if unwritten is not None:  # recovery takes a record without this line for a run that never started
        _tell(sock, f"unrecorded {unwritten}")
        return 0
    if plan.lock_fd is not None:
        held.discard(plan.lock_fd)
        os.close(plan.lock_fd)
    missed = limits.apply(plan.limit_steps)
    job, report, missed_pids = _start(plan)
    missed += missed_pids
    outputs = {}  # where max_output limits it: its output files and their sizes as it starts
    if plan.max_output is not None and job is not None:
        outputs = {fd: os.fstat(fd).st_size for fd in (plan.stdout_fd, plan.stderr_fd) if fd is not None}
    for fd in (plan.script_fd, plan.stdout_fd, plan.stderr_fd):
        if fd is not None and fd not in outputs:
            held.discard(fd)
            os.close(fd)
    if job is None:
        reason = jobstart.reason(report, plan)
        _record_end(plan, sock, {"event": "failed", "reason": reason, "at": _now()}, f"failed {reason}")
        ended = jobend.end_unreported(plan)
        _close_session(plan)
        return 0 if ended else 1
    _record(plan, {"event": "job", "pid": job})
    missed_memory, over = limits.apply_memory(plan.memory_steps)  # this monitor has left the job's groups
    if over:
        jobend.signal_all(plan, job, signal.SIGKILL)
    _tell(sock, *(["unenforced " + ",".join(missed_memory + missed)] if missed or missed_memory else []),
          f"started {job}")
    status, kill_at = _watch(plan, sock, job, outputs)
    if status is None:
        _record_end(plan, sock, {"event": "failed", "reason": LOST, "at": _now()}, f"failed {LOST}")
        _close_session(plan)
        ended = jobend.clean_up(plan, job, pinned=False)
        jobend.remove_groups(plan)
        return 0 if ended else 1
    _record(plan, {"event": "exited", "status": status, "at": _now()})  # kept should this process die cleaning up
    reaped = False
    grace = None if kill_at is None else max(kill_at - time.monotonic(), 0.0)  # a stop's KILL keeps its time
    # what the job left is ended before the run's end is told: its slot is held till then
    ended_all = jobend.clean_up(plan, job, pinned=True, over=_hurry(plan, sock, outputs), grace=grace)
    used = limits.usage(plan.usage_reads)  # read before its cgroups go
    source = "cgroup"
    if "peak_mem" not in used or "cpu" not in used:
        source = "rusage" if not plan.limit_groups else "cgroup+rusage"
        if ended_all:  # only the rusage of its leader (and the children it waited for) says the rest: reaped now
            rusage, reaped = jobend.reap_leader(job), True
            if rusage is not None:
                used.setdefault("peak_mem", int(rusage.ru_maxrss) * 1024)
                used.setdefault("cpu", round(rusage.ru_utime + rusage.ru_stime, 3))
    used["source"] = source
    if over:  # killed here for its memory, not by the kernel: counted as the kernel's kills are
        used["oom"] = used.get("oom", 0) + 1
    _record_end(plan, sock, {"event": "ended", "status": status, "at": _now(), "usage": used},
                "usage " + json.dumps(used, separators=(",", ":")), f"ended {status}")
    _close_session(plan)
    try:
        jobend.remove_groups(plan)
        return 0 if ended_all else 1
    finally:
        if not reaped:
            jobend.reap_leader(job)  # only now: its pid, group and session were the job's until here


def _start(plan: Plan) -> tuple[int | None, str, list[str]]:
    """Start the job, in its owner's PAM session if any: its pid or None, the report, the limits left unset.
    Its pids limit comes down to its own before this monitor (or the PAM child) leaves its groups."""
    missed: list[str] = []

    def fork_job():
        return *jobstart.start(plan, lambda: missed.extend(limits.apply(plan.pids_steps))), missed

    if plan.pam_user is None:
        return fork_job()
    return pam.start(plan.pam_service, plan.pam_user, fork_job, lambda: jobstart.leave(list(plan.joined[0])))


def _hurry(plan: Plan, sock: socket.socket, outputs: dict[int, int]):
    """For the clean-up of what a job left: kill it at once rather than after kill_grace? Once it has written
    past max_output (the stop then recorded and told), or a driver asked a hard stop."""
    hurried: list[bool] = []

    def hurry() -> bool:
        if not hurried and outputs and _written(outputs) > plan.max_output:
            hurried.append(True)
            if _asked_stop(plan) is None:  # a run already stopped (its time limit, a cancel) keeps that reason
                _record(plan, {"event": "stop", "why": "output", "by": None})
                _tell(sock, "stop output")
        if not hurried and _ASKED:
            _ASKED.clear()
            if _asked_stop(plan) == "shutdown":
                hurried.append(True)
        return bool(hurried)
    return hurry


def _close_session(plan: Plan) -> None:
    """Close the owner's PAM session, if any, once the driver knows the job's leader ended."""
    if plan.pam_user is not None:
        pam.close(plan.pam_service, plan.pam_user)


def _written(outputs: dict[int, int]) -> int:
    """Bytes written to the output files since the job started (a retry appends: only this run's count)."""
    try:
        return sum(max(os.fstat(fd).st_size - size, 0) for fd, size in outputs.items())
    except OSError:
        return 0


def _watch(plan: Plan, sock: socket.socket, job: int, outputs: dict[int, int]):
    """Wait for the job's leader to exit: its wait status (None if lost), and when a stop under way KILLs what
    is left (None if none is). At its time limit, past max_output (``outputs``: the files and their sizes at
    its start) or at a driver's SIGUSR2 the reason is recorded first, then TERM, KILL after ``kill_grace``
    (at once for a hard stop), again until it is gone."""
    deadline = None if plan.deadline is None else time.monotonic() + plan.deadline - time.time()
    look_at_output = time.monotonic() + OUTPUT_CHECK if outputs else None
    stopping, kill_at = None, None
    while True:
        status = jobend.leader_exit(job)
        if status is not jobend.RUNNING:
            return status, kill_at
        now = time.monotonic()
        ours = None  # a stop this process decides, which it records (a driver's is in the record already)
        if stopping is None and _ASKED:
            _ASKED.clear()
            stopping = _asked_stop(plan)
        if stopping is None and deadline is not None and now >= deadline:
            stopping = ours = "timeout"
        if stopping is None and look_at_output is not None and now >= look_at_output:
            look_at_output = now + OUTPUT_CHECK
            stopping = ours = "output" if _written(outputs) > plan.max_output else None
        if stopping is not None and kill_at is None:
            if ours is not None:
                _record(plan, {"event": "stop", "why": ours, "by": None})
            _tell(sock, f"stop {stopping}")
            jobend.signal_all(plan, job, signal.SIGKILL if stopping == "shutdown" else signal.SIGTERM)
            kill_at = now if stopping == "shutdown" else now + plan.kill_grace
        if kill_at is not None and now >= kill_at:
            jobend.signal_all(plan, job, signal.SIGKILL)
            kill_at = now + KILL_AGAIN  # a fork bomb is caught on a later round
        waits = [t - now for t in (*((deadline, look_at_output) if stopping is None else ()), kill_at) if t is not None]
        try:
            select.select([_WAKE[0]], [], [], max(min(waits), 0.0) if waits else None)
            os.read(_WAKE[0], 512)
        except BlockingIOError:
            pass


def _asked_stop(plan: Plan) -> str | None:
    """The reason of the ``stop`` line a driver wrote into the run record before it sent SIGUSR2."""
    try:
        fd = os.open(plan.record_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            data = os.read(fd, 1 << 20)
        finally:
            os.close(fd)
    except OSError:
        return None
    for raw in data.split(b"\n"):
        if b'"stop"' in raw:
            try:  # from the line's last event: past a line a full disk cut short, as onite.core.runrecord.parse
                event = json.loads(raw[max(raw.rfind(b'{"event":'), 0):])
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == "stop" and event.get("why") in STOPS:
                return event["why"]
    return None


def _record(plan: Plan, event: dict) -> str | None:
    """Append ``event`` to the run record; None once its whole line is written, else why not."""
    data = memoryview((json.dumps(event, separators=(",", ":")) + "\n").encode())
    try:
        while data:
            data = data[os.write(plan.record_fd, data):]  # after a short write, the next says why (ENOSPC)
        return None
    except OSError as err:
        return err.strerror or str(err)


def _record_end(plan: Plan, sock: socket.socket, event: dict, *message: str) -> None:
    """Record how the job ended, then tell the driver; on a full disk retry each second until written or the
    record is unlinked (filed): until then only this process keeps the job's exit status."""
    written = _record(plan, event) is None
    _tell(sock, *message)
    while not written:
        try:
            if os.fstat(plan.record_fd).st_nlink == 0:
                return
        except OSError:
            return
        time.sleep(1.0)
        written = _record(plan, event) is None


def _tell(sock: socket.socket, *lines: str) -> bool:
    """Send ``lines`` in one datagram; False if the driver is gone (the record says it all)."""
    try:
        sock.send("".join(line.replace("\n", " ") + "\n" for line in lines).encode("utf-8", "replace"))
        return True
    except OSError:
        return False


def _now() -> str:
    return datetime.now().astimezone().isoformat()


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor from 3 up but ``keep``."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)  # nothing when fd <= low
        low = max(low, fd + 1)
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
