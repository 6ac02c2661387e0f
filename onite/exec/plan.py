"""The Plan: everything a monitor needs for one run, decided by the driver, and how it travels.

A Plan goes to its monitor in one datagram: its data in a memfd (no environment is too large), its
descriptors by SCM_RIGHTS, so that a driver killed while sending sent it whole or not at all.
"""

from __future__ import annotations

import marshal
import os
import socket
from dataclasses import dataclass, fields

FD_FIELDS = ("script_fd", "stdout_fd", "stderr_fd", "record_fd", "lock_fd")
SCRIPT = b"\0script\0"  # in argv: where /dev/fd/N of the script goes, N its number in the monitor


@dataclass(frozen=True)
class Plan:
    argv: tuple[bytes, ...]  # argv[0] is the program; SCRIPT, as sent, is the script's /dev/fd path once received
    env: dict[bytes, bytes]
    cwd: bytes
    umask: int
    uid: int | None  # None: keep the monitor's credentials
    gid: int | None
    groups: tuple[int, ...]
    script_fd: int  # the memfd holding the job text, read by the interpreter as /dev/fd/N
    stdout_fd: int
    stderr_fd: int | None  # None: stderr goes with stdout
    record_fd: int  # the run record, opened O_APPEND
    record_path: str
    lock_fd: int | None  # the driver lock (closed once the ``monitor`` line is written)
    cgroup: str | None
    contain: str  # onite.exec.contain kind
    kill_grace: float
    mem: int | None = None  # MiB it asked for (its limit)
    cpus: int | None = None  # CPUs it asked for (its limit)
    joined: tuple = ((), "")  # the monitor's: the cgroups it is in already (Slot), as jobstart.join says
    deadline: float | None = None  # when (time.time()) its time limit ends it
    max_output: int | None = None  # bytes it may write to its output files (None: no limit)
    limit_groups: tuple[str, ...] = ()  # cgroup v1 groups holding its limits, joined too
    limit_steps: tuple = ()  # onite.exec.limits.Limiter.steps
    memory_steps: tuple = ()  # onite.exec.limits.Limiter.memory_steps
    usage_reads: tuple = ()  # onite.exec.limits.Limiter.reads
    pids_steps: tuple = ()  # onite.exec.limits.Limiter.pids_steps, taken once the monitor has left its groups
    pam_service: str | None = None  # the PAM service of the session opened for its owner (None: none)
    pam_user: str | None = None  # its owner's account name, for that session

    def encode(self) -> tuple[bytes, list[int]]:
        """What ``receive`` reads: the fields, each descriptor by its place among those sent, and those descriptors."""
        fds = [getattr(self, name) for name in FD_FIELDS if getattr(self, name) is not None]
        values = tuple(fds.index(getattr(self, f.name)) + 1 if f.name in FD_FIELDS and getattr(self, f.name) is not None
                       else getattr(self, f.name) for f in fields(self))
        return marshal.dumps(values), fds


def receive(sock: socket.socket) -> Plan | None:
    """The next Plan the driver sends, with the descriptors received; None once the driver's end is closed."""
    try:
        word, fds, _, _ = socket.recv_fds(sock, 16, 16)
    except OSError:
        return None
    if not word or not fds:
        for fd in fds:
            os.close(fd)
        return None
    try:
        values = marshal.loads(os.pread(fds[0], 1 << 30, 0))
    finally:
        os.close(fds[0])
    plan = dict(zip([f.name for f in fields(Plan)], values))
    for name in FD_FIELDS:
        if plan[name] is not None:
            plan[name] = fds[plan[name]]
    here = f"/dev/fd/{plan['script_fd']}".encode()
    plan["argv"] = tuple(here if part == SCRIPT else part for part in plan["argv"])
    return Plan(**plan)


def memory_file(name: str, data: bytes = b"") -> int:
    """A close-on-exec file in memory holding ``data``, at its start; OSError if it cannot be made."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        raise
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
