"""How a job's monitor waits for the job's end and ends what the job left running.

The job's leader is waited for unreaped (``leader_exit``): its zombie keeps its pid, process group and
session, so signals to the group reach only the job's processes; it is reaped once what it left is
ended. Its other processes come back to the monitor (a subreaper) as orphans. Runs in the monitor.
"""

from __future__ import annotations

import os
import signal
import time

from onite.exec import contain, limits
from onite.exec.plan import Plan


RUNNING = object()  # ``leader_exit``: the leader has not exited yet


def remove_groups(plan: Plan) -> None:
    if plan.cgroup:
        contain.remove_cgroup(plan.cgroup)
    limits.remove(plan.limit_groups)


def leader_exit(job: int):
    """Reap the job's orphans that have exited; the leader's wait status once it has exited (left unreaped),
    RUNNING until then, None if it is no child of this process (its status is lost)."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:
            return None
        if info is None:
            return _traced_exit(job)
        if info.si_pid == job:
            return _wait_status(info)
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            pass


def _traced_exit(job: int):
    """The leader's wait status from /proc if it is a zombie only its tracer sees (its owner may trace it
    from outside the job); RUNNING while any thread of it runs."""
    fields = contain.stat_fields(job)
    try:
        if fields is None or fields[0] != b"Z" or len(fields) < 50 or os.listdir(f"/proc/{job}/task") != [str(job)]:
            return RUNNING
        return int(fields[49])  # field 52: the exit status, as waitpid gives it
    except (OSError, ValueError):
        return RUNNING


def _wait_status(info) -> int:
    """The wait status (as ``waitpid`` gives it) of a waitid siginfo."""
    if info.si_code == os.CLD_EXITED:
        return (info.si_status & 0xFF) << 8
    if info.si_code == os.CLD_DUMPED:
        return (info.si_status & 0x7F) | 0x80
    return info.si_status & 0x7F


def reap_leader(job: int):
    """Reap the job's leader: its rusage, or None if it is gone or a tracer holds it (reaped as an orphan)."""
    try:
        pid, _, rusage = os.wait4(job, os.WNOHANG)
    except ChildProcessError:
        return None
    return rusage if pid else None


def left_running(plan: Plan, job: int, *, pinned: bool) -> bool:
    """Is anything of the job running besides its leader's zombie: its cgroup, this subreaper's other
    children, or without containment its process group (only while ``pinned``: the leader unreaped)?"""
    children = reap_others(job)
    if plan.cgroup and contain.is_populated(plan.cgroup):  # a zombie is in no cgroup
        return True
    if plan.contain != contain.OFF:
        return children
    return pinned and contain.group_has_others(job)


def clean_up(plan: Plan, job: int, *, pinned: bool, over=None, grace: float | None = None) -> bool:
    """End what the job left running (TERM, then KILL after ``grace`` or kill_grace, or once ``over()``);
    False if something of it could not be ended. Its cgroups stay (remove_groups)."""
    def alive() -> bool:
        return left_running(plan, job, pinned=pinned)

    if not alive():
        return True
    signal_all(plan, job, signal.SIGTERM, pinned=pinned)
    deadline = time.monotonic() + (plan.kill_grace if grace is None else grace)
    while alive() and time.monotonic() < deadline and not (over is not None and over()):
        time.sleep(0.02)
    tries = 0
    while alive() and tries < 500:  # a fork bomb is caught on a later round
        signal_all(plan, job, signal.SIGKILL, pinned=pinned)
        time.sleep(0.01)
        tries += 1
    return not alive()


def end_unreported(plan: Plan) -> bool:
    """Kill a job whose start was never reported (its PAM child died after forking it) with what it left;
    False if something stays."""
    ended = True
    for orphan in children():
        try:
            os.kill(orphan, signal.SIGKILL)  # unreaped, so still the job's leader
            os.waitid(os.P_PID, orphan, os.WEXITED | os.WNOWAIT)
        except (ProcessLookupError, ChildProcessError):
            continue
        ended = clean_up(plan, orphan, pinned=True) and ended
        reap_leader(orphan)
    remove_groups(plan)
    return ended


def signal_all(plan: Plan, job: int, sig: int, *, pinned: bool = True) -> None:
    """Send ``sig`` to the job's process group (only while ``pinned``), its cgroup (SIGKILL: its v1 groups
    too), and every descendant of this subreaper, each checked to be the process that was listed."""
    if pinned:
        contain.signal_group(job, sig)
    if plan.cgroup:
        if sig == signal.SIGKILL:
            contain.kill_cgroup(plan.cgroup)
        else:
            contain.signal_cgroup(plan.cgroup, sig)
    if plan.contain != contain.OFF:
        if sig == signal.SIGKILL:  # the v1 groups hold all it started, and take no new process from now
            contain.kill_groups(plan.limit_groups, rounds=1)  # clean_up looks again
        for pid, ticks in contain.descendants(os.getpid()):
            contain.signal_exact(pid, ticks, sig)


def reap_others(job: int) -> bool:
    """Reap every child that has exited but the job's leader; True if another child remains."""
    remain = False
    for child in children():
        if child == job:
            continue
        try:
            pid, _ = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            continue
        remain = remain or pid == 0
    return remain


def children() -> list[int]:
    """This process's children (zombies included), from /proc."""
    pid = os.getpid()
    try:
        return [int(word) for word in contain.read_file(f"/proc/{pid}/task/{pid}/children").split()]
    except (OSError, ValueError):  # a kernel without CONFIG_PROC_CHILDREN
        return [child for child, fields in contain.listed() if int(fields[1]) == pid]
