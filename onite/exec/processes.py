"""Finding and stopping processes by what they carry, where no monitor or record names them.

Every process of a job inherits ONITE_JOB, ONITE_RUN_ID and ONITE_JOB_SPOOL (onite.exec.launch).
Each is signalled through a pidfd, never a later process given its pid.
"""

from __future__ import annotations

import os
import signal
import time

from onite.exec import contain
from onite.exec.contain import signal_exact

ENVIRON_LIMIT = 8 << 20  # bytes of a process's environment read: the kernel's own limit is lower
KILL_SETTLE = 5.0  # seconds after SIGKILL in which processes still found are signalled again


def _scan(what: str, limit: int, uid: int | None = None):
    """(pid, /proc/PID/``what``) of every process but this one (of ``uid`` only) this process may read."""
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
    """The processes of job ``name`` of ``spool`` whose ONITE_RUN_ID passes ``run_id_ok``, by their
    environment (a driver that is not root finds only its own user's)."""
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
    """SIGTERM what ``find()`` returns, SIGKILL what it still finds after ``grace`` s (found again while
    waiting: children started late are caught); how many were signalled."""
    signalled: set[int] = set()
    deadline = time.monotonic() + grace
    sig = signal.SIGTERM
    while True:
        pids = find()
        if not pids:
            return len(signalled)
        for pid in pids:
            if (sig == signal.SIGKILL or pid not in signalled) and signal_exact(pid, None, sig):
                signalled.add(pid)
        if sig == signal.SIGKILL and time.monotonic() > deadline + KILL_SETTLE:
            return len(signalled)
        if time.monotonic() >= deadline:
            sig = signal.SIGKILL
        time.sleep(0.05)


def kill_groups(groups) -> bool:
    """SIGKILL every process in these v1 groups (all a dead run started); True if any was there."""
    killed = False
    for group in groups:
        for _ in range(50):  # a process forking meanwhile is caught on a later round
            if not contain.cgroup_pids(group):
                break
            killed = True
            contain.kill_cgroup(group)
            time.sleep(0.01)
    return killed
