"""How a job's monitor starts the job's process, and the reason it records when that fails.

Runs in the monitor: imports only os, errno, signal and subprocess.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess

from onite.exec.plan import Plan

def join(paths, joined: tuple[list[str], str] = ((), "")) -> tuple[list[str], str]:
    """Move this monitor into the cgroups ``paths`` (but those ``joined`` has), so that the process it forks
    next is born in them; the groups it is in, and ``cgroup ERRNO `` if one could not be joined."""
    done, failed = list(joined[0]), joined[1]
    try:
        for path in paths:
            if not failed and path not in done and _move_here(path):
                done.append(path)
    except OSError as err:
        failed = f"cgroup {err.errno or 0} "
    return done, failed


def leave(joined: list[str]) -> None:
    """Back to the monitor's own cgroups (the parent of the jobs' folder) from those ``join`` joined."""
    for path in reversed(joined):
        try:
            _move_here(os.path.dirname(os.path.dirname(path)))
        except OSError:
            pass  # it stays in the job's cgroup: its end is recorded before that cgroup is killed


def start(plan: Plan, forked=None) -> tuple[int | None, str]:
    """Start the job's process: its pid, or None and ``STAGE ERRNO WHAT`` for ``reason``; ``forked()`` runs
    once it does, before this monitor leaves its cgroups.

    subprocess forks and executes in C, so the rest is done here around the fork: this monitor joins the
    job's cgroups and enters its directory with the owner's effective ids (real and saved stay root's, so
    the owner cannot signal or trace it meanwhile); the child starts a new session, drops to the owner
    and executes the interpreter with every descriptor closed but its script's."""
    groups, failed = join(((plan.cgroup,) if plan.cgroup else ()) + tuple(plan.limit_groups), plan.joined)
    if failed:
        leave(groups)
        return None, failed
    stage, null, chld = "chdir", None, signal.signal(signal.SIGCHLD, _kill_stopped)
    try:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        _enter_as_owner(plan)
        stage = "exec"
        program = plan.argv[0] if b"/" in plan.argv[0] else b"./" + plan.argv[0]  # no PATH search, as execve
        switch = plan.uid is not None
        child = subprocess.Popen(
            list(plan.argv), executable=program, env=plan.env, stdin=null, stdout=plan.stdout_fd,
            stderr=plan.stderr_fd if plan.stderr_fd is not None else plan.stdout_fd, close_fds=True,
            pass_fds=(plan.script_fd,), start_new_session=True, umask=plan.umask, restore_signals=True,
            user=plan.uid if switch else None, group=plan.gid if switch else None,
            extra_groups=list(plan.groups) if switch else None)
        child.returncode = 0  # reaped by the monitor (onite.exec.jobend), never by subprocess
        if forked is not None:
            forked()
        return child.pid, ""
    except OSError as err:
        if stage == "exec" and not err.filename:  # it failed before the exec: dropping to the owner
            stage = "exec" if err.errno in (errno.EAGAIN, errno.ENOMEM) else "user"
        what = _path_text(plan.argv[0]) if stage == "exec" and err.filename else ""
        return None, f"{stage} {err.errno or 0} {what}"
    except (ValueError, subprocess.SubprocessError) as err:  # e.g. an embedded NUL byte
        return None, f"{stage} 0 {type(err).__name__}"
    finally:
        signal.signal(signal.SIGCHLD, chld)
        if null is not None:
            os.close(null)
        leave(groups)
        try:
            os.chdir("/")
        except OSError:
            pass


def _kill_stopped(signum, frame) -> None:
    """SIGCHLD while ``start`` waits for the exec: a child the owner stopped between its drop and its exec
    would keep this monitor waiting for ever, so it is killed (its run ends by signal 9)."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WSTOPPED | os.WNOHANG)
        except ChildProcessError:
            return
        if info is None:
            return
        try:
            os.kill(info.si_pid, signal.SIGKILL)  # unreaped: its pid is still its own
        except ProcessLookupError:
            pass


def _move_here(cgroup: str) -> bool:
    """Move this process into ``cgroup``; False if it is gone, OSError if it cannot be joined."""
    try:
        fd = os.open(f"{cgroup}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)
    return True


def _enter_as_owner(plan: Plan) -> None:
    """Enter the job's directory with its owner's rights (or the monitor's own); OSError if it cannot."""
    if plan.uid is None:
        os.chdir(plan.cwd)
        return
    groups, egid = os.getgroups(), os.getegid()
    try:
        os.setgroups(list(plan.groups))
        os.setresgid(-1, plan.gid, -1)
        os.setresuid(-1, plan.uid, -1)
        os.chdir(plan.cwd)
    finally:  # whatever failed, this monitor goes on with root's ids (it serves other owners' runs)
        try:
            os.setresuid(-1, 0, -1)
            os.setresgid(-1, egid, -1)
            os.setgroups(groups)
        except OSError:
            os._exit(70)  # cannot be: the saved uid is root's; never go on with the owner's rights


def reason(report: str, plan: Plan) -> str:
    """The reason recorded for a job that failed before its interpreter ran; every check behind it was made
    with the owner's rights: no oracle for paths the owner may not see."""
    stage, _, rest = report.partition(" ")
    code_text, _, what = rest.partition(" ")
    code = int(code_text) if code_text.isdigit() else 0
    cwd = _path_text(plan.cwd)
    if stage == "pam":  # onite.exec.pam: PAM's own words
        return what
    if stage == "chdir":
        if code == errno.ENOENT:
            return f"its directory {cwd} no longer exists"
        if code == errno.ENOTDIR:
            return f"its directory {cwd} is not a directory"
        return f"cannot enter its directory {cwd}: {_words(code, what)}"
    if stage == "exec":
        program = what or _path_text(plan.argv[0])
        if code == errno.ENOENT:
            return f"cannot start {program}: no such file"
        return f"cannot start {program}: {_words(code, what)}"
    doing = {"cgroup": "cannot join its cgroup", "user": "cannot switch to its owner"}.get(stage, "cannot start")
    return f"{doing}: {_words(code, what)}"


def _path_text(path: bytes) -> str:
    """A path in a reason, a byte that is not UTF-8 spelt ``\\xff`` (as onite.core.safetext spells it)."""
    return path.decode("utf-8", "backslashreplace")


def _words(code: int, fallback: str) -> str:
    """An errno as the lower-case words reasons use ("permission denied")."""
    if not code:
        return fallback or "failed"
    text = os.strerror(code)
    return text[:1].lower() + text[1:]
