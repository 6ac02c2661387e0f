"""A PAM session for a local job's owner, as atd and cron open one: limits.conf, pam_loginuid.

A child of the job's monitor opens it and forks the job, so that the job, never the monitor, gets
what pam_limits and pam_loginuid set; the monitor closes it once the job has ended. Runs in the
monitor, which imports pamela (ctypes over libpam) from the folder the driver found it in.
"""

from __future__ import annotations

import json
import os
import sys

SERVICE_DIRS = ("/etc/pam.d", "/usr/lib/pam.d")  # where libpam looks for a service's file


class Pam:
    """``service`` (None: no session), the folder pamela is imported from, ``why`` none; ``required``:
    no local job starts without one."""

    def __init__(self, service: str | None = None, path: str | None = None, why: str = "",
                 required: bool = False) -> None:
        self.service, self.path, self.why, self.required = service, path, why, required

    def describe(self) -> str:
        """For the log and ``onite status``."""
        if self.service is not None:
            return f"a session for each job's owner (service {self.service}: its limits and login uid)"
        return f"no session ({self.why}): job limits are the driver's"


def missing_service(service: str, dirs: tuple[str, ...] = SERVICE_DIRS) -> bool:
    """Is ``service``'s file in none of ``dirs``?"""
    return not any(os.path.isfile(f"{folder}/{service}") for folder in dirs)


def discover(mode: str, service: str, root: bool) -> Pam:
    """The PAM this driver can give its jobs (``mode``: onite.toml's ``pam``)."""
    required = mode == "required"
    if mode == "off":
        return Pam(why="pam = off in onite.toml")
    if not root:
        return Pam(why="the driver is not root: jobs run as it", required=required)
    if missing_service(service):
        return Pam(why=f"no service {service} in /etc/pam.d", required=required)
    try:
        import pamela
    except Exception as err:  # not installed, or no libpam: pamela loads it as it is imported
        return Pam(why=f"pamela cannot be loaded: {type(err).__name__}: {err}", required=required)
    return Pam(service, os.path.dirname(os.path.abspath(pamela.__file__)), required=required)


_LOADED: list = []  # a handle of the service, never ended: its modules stay loaded in the monitor


def load(path: str, service: str) -> None:
    """Import pamela from ``path`` and load ``service``'s modules ahead of a monitor's first run (a session
    then costs a millisecond, not ten); a failure here is the first run's to report."""
    if path not in sys.path:
        sys.path.append(path)
    try:
        import pamela

        _LOADED.append(pamela.pam_start(service, "root"))
    except Exception:
        pass


def start(service: str, user: str, fork_job, leave) -> tuple[int | None, str, list]:
    """Open ``user``'s session in a child of this monitor and run ``fork_job()`` there; the child exits once
    the job runs, which comes to the monitor, its subreaper. What ``fork_job`` returned, or None and
    ``pam 0 WHY``."""
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
    try:
        with open(read, "rb") as pipe:
            data = pipe.read()
    finally:
        os.waitpid(child, 0)  # once it is reaped, the job is this monitor's child
    try:
        return tuple(json.loads(data))  # what the child wrote: empty or cut short if it died
    except ValueError:
        return None, f"pam 0 its PAM session for {user} could not be opened: the process opening it died", []


def _open(service: str, user: str) -> str:
    """Check ``user``'s account and open its session in this process; "" or why PAM refused."""
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
    """Close ``user``'s session once its job has ended (with a handle of its own)."""
    try:
        import pamela

        pamela.close_session(user, service)
    except Exception:
        pass  # nothing of it is held here: pam_limits and pam_loginuid have nothing to undo
