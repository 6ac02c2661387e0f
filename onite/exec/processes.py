"""Finding and stopping a job's processes by what they carry, when no monitor or record says which they are.

A driver killed between starting a job and writing its run record leaves a
claim with no record; the job's processes, if any, are found by the
environment every process of a job inherits (ONITE_JOB, ONITE_RUN_ID,
ONITE_JOB_SPOOL: onite.exec.launch) and stopped through pidfds, so that a
pid reused meanwhile is never hit. These are bounded waits for other
processes to end: they run on the real clock.
"""

from __future__ import annotations

import os
import signal
import time

from onite.spool.filecheck import read_up_to

ENVIRON_LIMIT = 8 << 20  # bytes of a process's environment read: the kernel's own limit is lower
KILL_SETTLE = 5.0  # seconds after SIGKILL in which processes still found are signalled again


def find_run_processes(spool: str, name: str, run_id_ok) -> list[int]:
    """This machine's processes of job ``name`` of ``spool`` whose ONITE_RUN_ID passes ``run_id_ok``:
    read from each process's environment as it was started (/proc/PID/environ), which every
    process of a job inherits. Processes this one may not read are skipped: a driver that is not
    root runs only its own user's jobs.
    """
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


def stop_processes(find, grace: float) -> int:
    """SIGTERM every process ``find()`` returns, then SIGKILL those still found after ``grace``
    seconds. Each is signalled through a pidfd opened while it is known to match, so a pid reused
    meanwhile is never hit; ``find`` runs again while waiting, which catches children started late.
    Returns how many processes were signalled.
    """
    signalled: set[int] = set()
    deadline = time.monotonic() + grace
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
        if sig == signal.SIGKILL and time.monotonic() > deadline + KILL_SETTLE:
            return len(signalled)
        if time.monotonic() >= deadline:
            sig = signal.SIGKILL
        time.sleep(0.05)


def kill_leftovers(cgroup: str | None, groups: tuple[str, ...], spool: str, name: str, run_id: str, *,
                   known_pid: bool) -> None:
    """Kill what a run whose monitor is dead left running, and remove its groups (its monitor would
    have). With the monitor gone, the run's cgroup and its v1 limit groups hold only the job's
    processes, even where the monitor died between starting the job and recording its pid; where
    it had neither (and no pid is known), they are found by their ONITE_RUN_ID, as recovery finds
    those of a claim with no record (onite.drain.orphans)."""
    from onite.exec import contain, limits

    if cgroup:
        contain.kill_cgroup(cgroup)
        contain.remove_cgroup(cgroup)
    kill_groups(groups)
    limits.remove(groups)
    if not cgroup and not groups and not known_pid and spool:
        stop_processes(lambda: find_run_processes(spool, name, lambda found: found == run_id), 0.0)


def kill_groups(groups) -> bool:
    """SIGKILL every process in these v1 groups (a run's, once its monitor is gone: they hold every
    process it started, those that left its process group too); True if any was there."""
    from onite.exec.contain import cgroup_pids, kill_cgroup

    killed = False
    for group in groups:
        for _ in range(50):  # a process forking meanwhile is caught on a later round
            if not cgroup_pids(group):
                break
            killed = True
            kill_cgroup(group)
            time.sleep(0.01)
    return killed
