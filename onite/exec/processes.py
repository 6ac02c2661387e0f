"""Finding and stopping processes by what they carry, where no monitor or record names them.

Every process of a job inherits ONITE_JOB, ONITE_RUN_ID and ONITE_JOB_SPOOL (onite.exec.runner.job_environment).
Each is signalled through a pidfd, never a later process given its pid.
"""

from __future__ import annotations

import os
import signal
import time

from onite.core.runrecord import RunRecord
from onite.exec import contain, limits

ENVIRON_LIMIT = 8 << 20  # bytes of a process's environment read: the kernel's own limit is lower
KILL_SETTLE = 5.0  # seconds after SIGKILL in which processes still found are signalled again


def _scan(what: str, limit: int, uid: int | None = None):
    """(pid, /proc/PID/``what``) of every process but this one (of ``uid`` only) it may read."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if uid is not None and entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/{what}", "rb") as handle:
                yield int(entry.name), handle.read(limit)
        except OSError:
            continue


def find_run_processes(spool: str, name: str, run_id_ok) -> list[int]:
    """The processes of job ``name`` of ``spool`` whose ONITE_RUN_ID passes ``run_id_ok``."""
    wanted = {b"ONITE_JOB=" + name.encode(), b"ONITE_JOB_SPOOL=" + os.fsencode(spool)}
    found = []
    for pid, data in _scan("environ", ENVIRON_LIMIT):
        variables = set(data.split(b"\0"))
        run_id = next((v[len(b"ONITE_RUN_ID="):] for v in variables if v.startswith(b"ONITE_RUN_ID=")), None)
        if run_id is not None and wanted <= variables and run_id_ok(run_id.decode("utf-8", "replace")):
            found.append(pid)
    return found


def with_argument(argument: bytes, uid: int) -> list[tuple[int, int]]:
    """The live processes of ``uid`` with ``argument`` among their command-line words, with start times."""
    found = []
    for pid, data in _scan("cmdline", 1 << 20, uid):
        fields = contain.stat_fields(pid)
        if argument in data.split(b"\0") and fields is not None and fields[0] not in (b"Z", b"X"):
            found.append((pid, int(fields[19])))
    return found


def stop_processes(find, grace: float) -> int:
    """SIGTERM what ``find()`` returns, SIGKILL what it still finds after ``grace`` s; how many were signalled."""
    signalled: set[int] = set()
    deadline = time.monotonic() + grace
    sig = signal.SIGTERM
    while True:
        pids = find()
        if not pids:
            return len(signalled)
        for pid in pids:
            if (sig == signal.SIGKILL or pid not in signalled) and contain.signal_exact(pid, None, sig):
                signalled.add(pid)
        if sig == signal.SIGKILL and time.monotonic() > deadline + KILL_SETTLE:
            return len(signalled)
        if time.monotonic() >= deadline:
            sig = signal.SIGKILL
        time.sleep(0.05)


def stop_leftovers(rec: RunRecord | None, containment: contain.Containment, limiter: limits.Limiter, spool: str,
                   name: str, run_id: str, pgid: int | None = None) -> bool:
    """Stop what is left of run ``run_id`` of job ``name`` whose monitor is gone, and remove its groups; True if
    any of it ran. Only what its run record ``rec`` (None if unreadable) names and this driver may touch is
    signalled: its cgroup under the jobs' folder, its v1 groups, its process group where a process of that
    run leads it; with no groups and nothing killed, its processes found by their ONITE_RUN_ID."""
    base, killed = containment.base, False
    cgroup, groups = (rec.cgroup, limiter.groups_of(rec.groups)) if rec is not None else (None, ())
    pgid = (rec.job_pid if rec is not None else None) or pgid
    ours = lambda found: found == run_id  # noqa: E731
    if cgroup and base and cgroup.rpartition("/")[0] == base:
        killed = contain.is_populated(cgroup)
        if killed:
            contain.kill_cgroup(cgroup)
        contain.remove_cgroup(cgroup)
    if not killed:
        killed = contain.kill_groups(groups)
        if pgid and pgid > 1 and run_id and contain.signal_group(pgid, 0) and pgid in find_run_processes(
                spool, name, ours):
            os.killpg(pgid, signal.SIGKILL)
            killed = True
        if not killed and not cgroup and not groups and run_id:  # its leader gone, or never known
            killed = stop_processes(lambda: find_run_processes(spool, name, ours), 0.0) > 0
    limits.remove(groups)
    return killed
