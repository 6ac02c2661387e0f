"""A PAM session for a local job's owner, as atd and cron open one: limits.conf, pam_loginuid.

A child of the job's monitor opens it (account, then session) and forks the job, so that the job
is born with what pam_limits and pam_loginuid set, and the monitor never has it; the monitor
closes the session when the job has ended. The binding is pamela (ctypes over libpam), imported
by the monitor from the folder the driver found it in (the monitor runs ``python -E -S``). Runs
in the monitor: imports only os, json and sys, and pamela.
"""

from __future__ import annotations

import json
import os
import sys

SERVICE_DIRS = ("/etc/pam.d", "/usr/lib/pam.d")  # where libpam looks for a service's file


class Pam:
    """How this driver's jobs get their owner's account: ``service`` (None: no session), the folder
    pamela is imported from, and ``why`` none is opened; ``required``: a drain starts no local job
    without one."""

    def __init__(self, service: str | None = None, path: str | None = None, why: str = "",
                 required: bool = False) -> None:
        self.service, self.path, self.why, self.required = service, path, why, required

    def describe(self) -> str:
        """For the log and ``onite status``, once a drain: what applies to the jobs."""
        if self.service is not None:
            return f"a session for each job's owner (service {self.service}: its limits and login uid)"
        return f"no session ({self.why}): job limits are the driver's"


def discover(mode: str, service: str, root: bool) -> Pam:
    """The PAM this driver can give its jobs (``mode``: onite.toml's ``pam``)."""
    required = mode == "required"
    if mode == "off":
        return Pam(why="pam = off in onite.toml")
    if not root:
        return Pam(why="the driver is not root: jobs run as it", required=required)
    if not any(os.path.isfile(f"{folder}/{service}") for folder in SERVICE_DIRS):
        return Pam(why=f"no service {service} in /etc/pam.d", required=required)
    try:
        import pamela
    except Exception as err:  # not installed, or no libpam: pamela loads it as it is imported
        return Pam(why=f"pamela cannot be loaded: {type(err).__name__}: {err}", required=required)
    return Pam(service, os.path.dirname(os.path.abspath(pamela.__file__)), required=required)


_LOADED: list = []  # a handle of the service, never ended: its modules stay loaded in the monitor


def load(path: str, service: str) -> str:
    """Import pamela from ``path`` and load ``service``'s modules (in a monitor, ahead of its first
    run: each session then costs a millisecond, not ten); "" or why it cannot be."""
    if path not in sys.path:
        sys.path.append(path)
    try:
        import pamela

        _LOADED.append(pamela.pam_start(service, "root"))
    except Exception as err:
        return f"PAM cannot be loaded: {type(err).__name__}: {err}"
    return ""


def start(service: str, user: str, fork_job, leave) -> tuple[int | None, str, list]:
    """Open ``user``'s session and run ``fork_job()`` (onite.exec.jobstart.start: the job's pid or
    None, the report, the limits it could not set) in a child of this monitor, so that what
    pam_limits and pam_loginuid set is the child's, and so the job's, never the monitor's (root
    without CAP_SYS_RESOURCE could not raise its own hard limits back). The child exits once the
    job runs: the job, an orphan, comes to the monitor, its subreaper. The monitor leaves its own
    cgroups at once (the job's pids limit counts the child, not it). Returns what ``fork_job``
    returned, or None and ``pam 0 WHY`` PAM refused (nothing was forked then)."""
    read, write = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        try:
            os.close(read)
            refused = _open(service, user)
            said = [None, f"pam 0 {refused}", []] if refused else list(fork_job())
            os.write(write, json.dumps(said).encode())
        finally:
            os._exit(0)
    os.close(write)
    leave()
    data = b""
    try:
        while chunk := os.read(read, 65536):
            data += chunk
    finally:
        os.close(read)
        os.waitpid(child, 0)  # once it is reaped, the job is this monitor's child
    try:
        job, report, missed = json.loads(data)
    except ValueError:
        return None, f"pam 0 its PAM session for {user} could not be opened: the process opening it died", []
    return job, report, missed


def _open(service: str, user: str) -> str:
    """Check ``user``'s account and open a session for it in this process; "" or why PAM refused."""
    try:
        import pamela

        handle = pamela.pam_start(service, user)
    except Exception as err:
        return f"PAM cannot start service {service} for {user}: {err}"
    code = pamela.PAM_ACCT_MGMT(handle, 0)
    step = "its account" if code else "a session"
    if code == 0:
        code = pamela.PAM_OPEN_SESSION(handle, 0)
    if code:
        why = pamela.pam_strerror(handle, code)
        pamela.PAM_END(handle, code)
        return f"PAM (service {service}) refused {step} for {user}: {why}"
    return ""


def close(service: str, user: str) -> None:
    """Close ``user``'s session once its job has ended (a handle of its own: the one that opened it
    was the child's)."""
    try:
        import pamela

        pamela.close_session(user, service)
    except Exception:
        pass  # nothing of it is held here: pam_limits and pam_loginuid have nothing to undo
